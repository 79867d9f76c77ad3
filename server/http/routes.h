// The HTTP routes: OpenAI-compatible completions and chat, models, tokenize/detokenize, metrics and probes, the
// built-in page (/) and its KV state (/kv/state).
#pragma once

#include <string>
#include <vector>

#include "engine/runner/engine.h"
#include "server/http/http_server.h"
#include "server/http/openai.h"
#include "server/metrics.h"
#include "server/server_state.h"

namespace tq::server {

struct RouterOptions {
  ApiContext api;
  std::vector<std::string> api_keys;  // empty: no authentication
  int max_concurrent_requests = 0;    // generation requests at once; 0 = unlimited
  double request_timeout_s = 0;       // seconds from arrival until a generation is aborted; 0 = no limit
  bool web_ui = true;                 // GET / serves the built-in page (its data routes need the API key)
};

class Router {
 public:
  Router(RouterOptions options, engine::Engine* engine, Metrics* metrics, ServerState* state);

  void Handle(const HttpRequest& request, ResponseWriter& writer);

 private:
  void Completions(const HttpRequest& request, ResponseWriter& writer, bool chat);
  void Tokenize(const HttpRequest& request, ResponseWriter& writer);
  void Detokenize(const HttpRequest& request, ResponseWriter& writer);
  void Models(ResponseWriter& writer);
  void KvState(ResponseWriter& writer);
  bool Authorized(const HttpRequest& request) const;

  RouterOptions options_;
  engine::Engine* engine_;
  Metrics* metrics_;
  ServerState* state_;
};

}  // namespace tq::server
