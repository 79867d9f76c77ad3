// The HTTP routes: OpenAI-compatible completions and chat, models, tokenize/detokenize, metrics and probes, the
// built-in page (/) and its KV state (/kv/state).
#pragma once

#include <string>
#include <vector>

#include "engine/api.h"
#include "server/api_keys.h"
#include "server/generation.h"
#include "server/http/http_server.h"
#include "server/http/openai.h"
#include "server/metrics.h"
#include "server/response_store.h"
#include "server/server_state.h"

namespace tq::server {

struct RouterOptions {
  ApiContext api;
  const ApiKeys* api_keys = nullptr;  // null: no authentication
  bool web_ui = true;                 // GET / serves the built-in page (its data routes need the API key)
  ResponseStore* responses = nullptr; // /v1/responses store (store: true, previous_response_id)
};

class Router {
 public:
  // Generations go through `generation` (the admission path shared with gRPC).
  Router(RouterOptions options, engine::EngineApi* engine, Generation* generation, Metrics* metrics,
         ServerState* state);

  void Handle(const HttpRequest& request, ResponseWriter& writer);
  // HttpServer's header check: a 401 for a route that needs the API key when the header has no valid one, so
  // the body of an unauthenticated request is never read.
  std::optional<HttpResponse> CheckHeader(const HttpRequest& header);

 private:
  void Completions(const HttpRequest& request, ResponseWriter& writer, bool chat, const Caller& caller);
  void Tokenize(const HttpRequest& request, ResponseWriter& writer);
  void Detokenize(const HttpRequest& request, ResponseWriter& writer);
  void Models(ResponseWriter& writer);
  void Embeddings(const HttpRequest& request, ResponseWriter& writer, const Caller& caller);  // embeddings.cc
  void AdminLora(const HttpRequest& request, ResponseWriter& writer, const Caller& caller);
  // POST /v1/responses; GET and DELETE /v1/responses/{id} (server/http/responses.cc). Stored responses belong to
  // the caller's tenant: another key sees none of them (an admin key sees all).
  void Responses(const HttpRequest& request, ResponseWriter& writer, const Caller& caller);
  void StoredResponseRoute(const HttpRequest& request, ResponseWriter& writer, const std::string& id,
                           const Caller& caller);
  void KvState(ResponseWriter& writer);
  // The body of a generation request (completions, chat, responses, embeddings), or nullopt once a 503 (draining)
  // or a 400 (not JSON) is sent and counted under `endpoint`.
  std::optional<nlohmann::ordered_json> AcceptBody(const HttpRequest& request, ResponseWriter& writer,
                                                   const std::string& endpoint);
  // Who sent the request (accepted, admin, tenant); everyone is the one admin tenant when no keys are set.
  Caller Identify(const HttpRequest& request) const;

  RouterOptions options_;
  engine::EngineApi* engine_;
  Generation* generation_;
  Metrics* metrics_;
  ServerState* state_;
};

}  // namespace tq::server
