// Helpers the HTTP routes share: statuses as OpenAI error bodies, ids, JSON bodies and SSE events.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "server/http/http_server.h"

namespace tq::server {

// The HTTP status of a Status code (invalid_argument 400, not_found 404, resource_exhausted 429, ...).
http::status HttpStatusOf(StatusCode code);

// An OpenAI-shaped error response for `s`, naming `param` when set.
HttpResponse StatusResponse(const Status& s, std::string_view param = "");

// `prefix` and 16 random hex digits.
std::string NewId(std::string_view prefix);

// The body as JSON (objects keep their key order), or a 400 sent on `w` and nullopt.
std::optional<nlohmann::ordered_json> ParseJson(const HttpRequest& req, ResponseWriter& w);

// The OpenAI-shaped errors every body parser gives: a field the API does not know (what the lenient switch
// changes), and a `model` other than the served one.
Status UnknownFieldError(const std::string& field);
Status ModelNotServedError(const std::string& asked, const std::string& served);

// One server-sent event carrying `j`.
std::string SseData(const nlohmann::ordered_json& j);

}  // namespace tq::server
