#include "server/http/route_util.h"

#include <cstdio>
#include <random>

namespace tq::server {

using json = nlohmann::ordered_json;

http::status HttpStatusOf(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kOutOfRange: return http::status::bad_request;
    case StatusCode::kNotFound: return http::status::not_found;
    case StatusCode::kAlreadyExists: return http::status::conflict;
    case StatusCode::kResourceExhausted: return http::status::too_many_requests;
    case StatusCode::kUnavailable: return http::status::service_unavailable;
    case StatusCode::kUnauthenticated: return http::status::unauthorized;
    case StatusCode::kPermissionDenied: return http::status::forbidden;
    case StatusCode::kDeadlineExceeded: return http::status::gateway_timeout;
    case StatusCode::kUnimplemented: return http::status::not_implemented;
    default: return http::status::internal_server_error;
  }
}

namespace {

std::string_view ErrorType(http::status s) {
  switch (s) {
    case http::status::unauthorized: return "authentication_error";
    case http::status::not_found: return "not_found_error";
    case http::status::too_many_requests: return "rate_limit_error";
    case http::status::service_unavailable: return "service_unavailable";
    case http::status::gateway_timeout: return "timeout_error";
    case http::status::internal_server_error: return "server_error";
    default: return "invalid_request_error";
  }
}

}  // namespace

HttpResponse StatusResponse(const Status& s, std::string_view param) {
  const http::status hs = HttpStatusOf(s.code());
  return ErrorResponse(hs, s.message(), ErrorType(hs), param);
}

std::string NewId(std::string_view prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
  return std::string(prefix) + buf;
}

// Parses the body as JSON or answers 400.
std::optional<json> ParseJson(const HttpRequest& req, ResponseWriter& w) {
  try {
    return json::parse(req.body());
  } catch (const json::exception& e) {
    w.Send(ErrorResponse(http::status::bad_request, std::string("the body is not valid JSON: ") + e.what(),
                         "invalid_request_error"));
    return std::nullopt;
  }
}

Status UnknownFieldError(const std::string& field) {
  return InvalidArgumentError("unknown field '" + field +
                              "' (a server started with --ignore-unknown-fields ignores such fields)");
}

Status ModelNotServedError(const std::string& asked, const std::string& served) {
  return NotFoundError("model '" + asked + "' is not served here (this server serves '" + served + "')");
}

std::string SseData(const json& j) {
  return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace tq::server
