#include "server/http/routes.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <ctime>
#include <random>

#include "common/build_info.h"
#include "server/http/kv_state.h"
#include "server/http/route_util.h"
#include "server/http/web_ui.h"

namespace tq::server {

using json = nlohmann::ordered_json;

Router::Router(RouterOptions options, engine::EngineApi* engine, Generation* generation, Metrics* metrics,
               ServerState* state)
    : options_(std::move(options)), engine_(engine), generation_(generation), metrics_(metrics), state_(state) {}

Caller Router::Identify(const HttpRequest& req) const {
  if (options_.api_keys == nullptr) return {true, true, ""};
  const auto it = req.find(http::field::authorization);
  const std::string_view value =
      it == req.end() ? std::string_view() : std::string_view(it->value().data(), it->value().size());
  return options_.api_keys->Identify(value);
}

namespace {

std::string_view PathOf(const HttpRequest& req) {
  const std::string_view target(req.target().data(), req.target().size());
  return target.substr(0, target.find('?'));
}

// Routes that need the API key when keys are configured.
bool IsApiRoute(std::string_view path) {
  return path == "/v1/completions" || path == "/v1/chat/completions" || path == "/v1/models" ||
         path == "/v1/admin/lora" || path.rfind("/v1/admin/lora/", 0) == 0 ||
         path == "/v1/embeddings" || path == "/v1/responses" || path.rfind("/v1/responses/", 0) == 0 ||
         path == "/tokenize" || path == "/detokenize" || path == "/kv/state";
}

HttpResponse Unauthorized() {
  return ErrorResponse(http::status::unauthorized, "a valid API key is required (Authorization: Bearer KEY)",
                       "authentication_error");
}

}  // namespace

std::optional<HttpResponse> Router::CheckHeader(const HttpRequest& header) {
  const std::string_view path = PathOf(header);
  // Unknown paths go on to their 404 (and are not metric labels).
  if (!IsApiRoute(path) || Identify(header).accepted) return std::nullopt;
  metrics_->CountRequest(path, "unauthorized");
  return Unauthorized();
}

void Router::Handle(const HttpRequest& req, ResponseWriter& w) {
  const std::string_view path = PathOf(req);
  const bool get = req.method() == http::verb::get;
  const bool post = req.method() == http::verb::post;

  // Probes and metrics need no key (Kubernetes and Prometheus call them).
  if (path == "/health" && get) {
    w.Send(JsonResponse(http::status::ok, R"({"status":"ok"})"));
    return;
  }
  if (path == "/ready" && get) {
    if (state_->ready && !state_->draining) {
      w.Send(JsonResponse(http::status::ok, R"({"status":"ready"})"));
    } else {
      w.Send(JsonResponse(http::status::service_unavailable,
                          state_->draining ? R"({"status":"draining"})" : R"({"status":"loading"})"));
    }
    return;
  }
  // Everything below uses the engine: hold it for the rest of the request (server/engine_gate.h).
  const EngineGate::Use use = state_->engine_gate.Enter();
  if (!use) {
    w.Send(ErrorResponse(http::status::service_unavailable, "the server is shutting down", "service_unavailable"));
    return;
  }
  if (path == "/metrics" && get) {
    HttpResponse r{http::status::ok, 11};
    r.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    if (options_.responses != nullptr) metrics_->SetResponseStore(options_.responses->Stats());
    r.body() = metrics_->Scrape(engine_->Stats());
    w.Send(std::move(r));
    return;
  }
  // The page itself holds no data (it asks for the API key when one is needed); what it shows comes from
  // /kv/state and the chat routes, which check the key like every other route.
  if (options_.web_ui && (path == "/" || path == "/index.html") && get) {
    HttpResponse r{http::status::ok, 11};
    r.set(http::field::content_type, "text/html; charset=utf-8");
    r.set(http::field::cache_control, "no-store");
    r.set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                                     "script-src 'self' 'unsafe-inline'");
    r.body() = std::string(WebUiPage());
    w.Send(std::move(r));
    return;
  }
  if (!IsApiRoute(path)) {
    w.Send(ErrorResponse(http::status::not_found, "no route for " + std::string(path), "not_found_error"));
    return;
  }
  const Caller caller = Identify(req);
  if (!caller.accepted) {  // CheckHeader refused it already when the server reads through it
    metrics_->CountRequest(path, "unauthorized");
    w.Send(Unauthorized());
    return;
  }
  if (path == "/v1/admin/lora" || path.rfind("/v1/admin/lora/", 0) == 0) return AdminLora(req, w, caller);
  if (path.rfind("/v1/responses/", 0) == 0) {
    return StoredResponseRoute(req, w, std::string(path.substr(std::string_view("/v1/responses/").size())), caller);
  }
  const bool wants_post = path != "/v1/models" && path != "/kv/state";
  if ((wants_post && !post) || (!wants_post && !get)) {
    w.Send(ErrorResponse(http::status::method_not_allowed,
                         std::string(path) + " takes " + (wants_post ? "POST" : "GET"), "invalid_request_error"));
    return;
  }
  if (path == "/v1/models") return Models(w);
  if (path == "/kv/state") return KvState(w);
  if (path == "/tokenize") return Tokenize(req, w);
  if (path == "/detokenize") return Detokenize(req, w);
  if (path == "/v1/embeddings") return Embeddings(req, w, caller);
  if (path == "/v1/responses") return Responses(req, w, caller);
  Completions(req, w, path == "/v1/chat/completions", caller);
}

void Router::Models(ResponseWriter& w) {
  json data = json::array();
  data.push_back({{"id", options_.api.model_id},
                  {"object", "model"},
                  {"created", 0},
                  {"owned_by", "tqserve"},
                  {"max_model_len", options_.api.ctx_size}});
  for (const engine::LoraInfo& l : engine_->Loras()) {  // adapters: "MODEL:NAME", parent the base
    data.push_back(
        {{"id", options_.api.model_id + ":" + l.name},
         {"object", "model"},
         {"created", 0},
         {"owned_by", "tqserve"},
         {"parent", options_.api.model_id},
         {"max_model_len", options_.api.ctx_size},
         {"lora", {{"name", l.name}, {"scale", l.scale}, {"rank", l.rank}, {"matrices", l.matrices}}}});
  }
  w.Send(JsonResponse(http::status::ok, json{{"object", "list"}, {"data", data}}.dump()));
}

// /v1/admin/lora: GET lists the adapters (with their files), POST {"name", "path", "scale"} loads one,
// DELETE /v1/admin/lora/NAME unloads one (its running requests finish). Admin keys only: a path names a file
// on the server.
void Router::AdminLora(const HttpRequest& req, ResponseWriter& w, const Caller& caller) {
  const std::string_view path = PathOf(req);
  if (!caller.admin) {
    w.Send(ErrorResponse(http::status::forbidden, "managing LoRA adapters needs an admin key",
                         "permission_error"));
    return;
  }
  const auto info = [](const engine::LoraInfo& l) {
    return json{{"name", l.name}, {"path", l.path},         {"scale", l.scale},
                {"rank", l.rank}, {"matrices", l.matrices}, {"bytes", l.bytes}};
  };
  if (path == "/v1/admin/lora" && req.method() == http::verb::get) {
    json list = json::array();
    for (const engine::LoraInfo& l : engine_->Loras()) list.push_back(info(l));
    w.Send(JsonResponse(http::status::ok, json{{"object", "list"}, {"data", list}}.dump()));
    return;
  }
  if (path == "/v1/admin/lora" && req.method() == http::verb::post) {
    auto body = ParseJson(req, w);
    if (!body) return;
    if (!body->is_object() || !(*body)["name"].is_string() || !(*body)["path"].is_string() ||
        (body->contains("scale") && !(*body)["scale"].is_number())) {
      w.Send(ErrorResponse(http::status::bad_request,
                           "expected {\"name\": string, \"path\": string, \"scale\": number}",
                           "invalid_request_error"));
      return;
    }
    for (const auto& [key, value] : body->items()) {
      if (key != "name" && key != "path" && key != "scale") {
        w.Send(StatusResponse(UnknownFieldError(key), key));
        return;
      }
    }
    const std::string name = (*body)["name"];
    const float scale = body->contains("scale") ? (*body)["scale"].get<float>() : 1.0f;
    if (Status s = engine_->LoadLora(name, (*body)["path"], scale); !s.ok()) {
      w.Send(StatusResponse(s));
      return;
    }
    for (const engine::LoraInfo& l : engine_->Loras()) {
      if (l.name == name) {
        w.Send(JsonResponse(http::status::ok, info(l).dump()));
        return;
      }
    }
    w.Send(StatusResponse(NotFoundError("adapter '" + name + "' was unloaded again")));
    return;
  }
  constexpr std::string_view kItem = "/v1/admin/lora/";
  if (path.rfind(kItem, 0) == 0 && req.method() == http::verb::delete_) {
    const std::string name(path.substr(kItem.size()));
    if (Status s = engine_->UnloadLora(name); !s.ok()) {
      w.Send(StatusResponse(s));
      return;
    }
    w.Send(JsonResponse(http::status::ok, json{{"name", name}, {"deleted", true}}.dump()));
    return;
  }
  w.Send(ErrorResponse(http::status::method_not_allowed,
                       "/v1/admin/lora takes GET or POST, /v1/admin/lora/NAME takes DELETE",
                       "invalid_request_error"));
}

void Router::KvState(ResponseWriter& w) {
  w.Send(JsonResponse(http::status::ok, KvStateJson(engine_->Stats(), engine_->HeadPlacements())));
}

void Router::Tokenize(const HttpRequest& req, ResponseWriter& w) {
  auto body = ParseJson(req, w);
  if (!body) return;
  const json* text = nullptr;
  if (body->is_object()) {
    for (const char* key : {"content", "prompt", "text"}) {
      if (body->contains(key)) text = &(*body)[key];
    }
  }
  if (text == nullptr || !text->is_string()) {
    w.Send(ErrorResponse(http::status::bad_request, "'content' must be a string", "invalid_request_error",
                         "content"));
    return;
  }
  const auto special = body->find("add_special");
  if (special != body->end() && !special->is_boolean()) {
    w.Send(ErrorResponse(http::status::bad_request, "'add_special' must be a boolean", "invalid_request_error",
                         "add_special"));
    return;
  }
  const bool add_special = special == body->end() || special->get<bool>();
  const std::string s = text->get<std::string>();
  if (!IsValidUtf8(s)) {
    w.Send(ErrorResponse(http::status::bad_request, "'content' is not valid UTF-8", "invalid_request_error",
                         "content"));
    return;
  }
  const auto ids = engine_->Tokenize(s, {.add_special = add_special, .parse_special = true});
  w.Send(JsonResponse(http::status::ok, json{{"tokens", ids}}.dump()));
}

void Router::Detokenize(const HttpRequest& req, ResponseWriter& w) {
  auto body = ParseJson(req, w);
  if (!body) return;
  if (!body->is_object() || !body->contains("tokens") || !(*body)["tokens"].is_array()) {
    w.Send(ErrorResponse(http::status::bad_request, "'tokens' must be a list of token ids", "invalid_request_error",
                         "tokens"));
    return;
  }
  std::vector<int32_t> ids;
  const int32_t vocab = options_.api.vocab_size;
  for (const json& t : (*body)["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab) {
      w.Send(ErrorResponse(http::status::bad_request,
                           "token ids must be integers in [0, " + std::to_string(vocab) + ")",
                           "invalid_request_error", "tokens"));
      return;
    }
    ids.push_back(t.get<int32_t>());
  }
  auto text = engine_->Detokenize(ids);
  if (!text.ok()) {
    w.Send(StatusResponse(text.status(), "tokens"));
    return;
  }
  w.Send(JsonResponse(http::status::ok,
                      json{{"content", SanitizeUtf8(*text)}}.dump(-1, ' ', false, json::error_handler_t::replace)));
}

namespace {

// One HTTP request's view of its generation: streamed as server-sent events, or gathered into one JSON body.
class HttpStream final : public GenerationStream {
 public:
  HttpStream(const CompletionJob& job, const engine::EngineApi& engine, ResponseWriter& w, std::string id,
             int64_t created, const std::string& model)
      : job_(job), engine_(engine), w_(w), id_(std::move(id)), created_(created), model_(model),
        texts_(job.n), tokens_(job.n), started_(job.n, false), filters_(job.n, ToolCallFilter(job.tools)) {}

  // A stream's SSE headers go out at its first event or poll, so an admission error is still a plain HTTP error.
  // False once the client has gone.
  bool Begin() {
    if (!begun_) {
      begun_ = true;
      gone_ = job_.stream && !w_.StartStream();
    }
    return !gone_;
  }

  bool ClientGone() override { return !Begin() || w_.ClientGone(); }

  bool OnEvent(int c, const engine::GenerateEvent& ev, bool timed_out) override {
    if (!Begin()) return false;
    if (!job_.stream) {
      texts_[c] += ev.text;
      if (job_.logprobs) tokens_[c].insert(tokens_[c].end(), ev.tokens.begin(), ev.tokens.end());
      return true;
    }
    const std::string reason = timed_out ? "timeout" : ev.final ? OpenAiFinishReason(ev.finish_reason) : "";
    if (job_.tools.active()) return OnToolEvent(c, ev, reason);
    return Send(c, ev.text, ev.tokens, reason);
  }

  const std::vector<std::string>& texts() const { return texts_; }
  const std::vector<std::vector<engine::GeneratedToken>>& tokens() const { return tokens_; }

 private:
  bool Send(int c, const std::string& text, const std::vector<engine::GeneratedToken>& tokens,
            const std::string& reason) {
    const bool ok = w_.SendEvent(
        SseData(StreamChunk(job_, id_, created_, model_, c, text, tokens, reason, !started_[c], engine_)));
    started_[c] = true;
    return ok;
  }

  // Streaming with tools: text is sent as content up to where a call starts (or may start); the calls go out
  // whole, as delta.tool_calls, when the choice ends, followed by finish_reason "tool_calls".
  bool OnToolEvent(int c, const engine::GenerateEvent& ev, const std::string& reason) {
    std::string text = filters_[c].Push(ev.text);
    if (!ev.final) {
      if (text.empty() && !job_.logprobs && started_[c]) return true;  // held back: nothing to send yet
      return Send(c, text, ev.tokens, "");
    }
    ToolCallFilter::End end = filters_[c].Finish();
    text += end.content;
    if (end.calls.empty()) return Send(c, text, ev.tokens, reason);
    if ((!text.empty() || !ev.tokens.empty() || !started_[c]) && !Send(c, text, ev.tokens, "")) return false;
    if (!w_.SendEvent(SseData(ToolCallChunk(job_, id_, created_, model_, c, std::move(end.calls))))) return false;
    return Send(c, "", {}, ev.finish_reason == engine::FinishReason::kStop ? "tool_calls" : reason);
  }

  const CompletionJob& job_;
  const engine::EngineApi& engine_;
  ResponseWriter& w_;
  std::string id_;
  int64_t created_;
  const std::string& model_;
  std::vector<std::string> texts_;                          // [n], non-streaming
  std::vector<std::vector<engine::GeneratedToken>> tokens_;  // [n], non-streaming with logprobs
  std::vector<bool> started_;                               // [n], streaming: the first chunk went out
  std::vector<ToolCallFilter> filters_;                     // [n], streaming with tools
  bool begun_ = false, gone_ = false;                       // Begin() ran; the client had gone by then
};

}  // namespace

std::optional<json> Router::AcceptBody(const HttpRequest& req, ResponseWriter& w, const std::string& endpoint) {
  if (state_->draining) {
    metrics_->CountRequest(endpoint, "rejected");
    w.Send(ErrorResponse(http::status::service_unavailable, "the server is draining", "service_unavailable"));
    return std::nullopt;
  }
  auto body = ParseJson(req, w);
  if (!body) metrics_->CountRequest(endpoint, "invalid");
  return body;
}

void Router::Completions(const HttpRequest& req, ResponseWriter& w, bool chat, const Caller& caller) {
  const std::string endpoint = chat ? "/v1/chat/completions" : "/v1/completions";
  RequestDeadline deadline(generation_->limits().request_timeout_s);
  auto body = AcceptBody(req, w, endpoint);
  if (!body) return;
  ParseError perr;
  auto job = ParseCompletionRequest(*body, chat, options_.api, &perr);
  if (!job) {
    metrics_->CountRequest(endpoint, "invalid");
    w.Send(StatusResponse(perr.status, perr.param));
    return;
  }

  job->request.cache_salt = TenantCacheSalt(caller.tenant, job->request.cache_salt);
  const std::string id = NewId(chat ? "chatcmpl-" : "cmpl-");
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  const std::string model =
      options_.api.model_id + (job->request.lora.empty() ? "" : ":" + job->request.lora);  // echoed as asked
  std::vector<engine::GenerateRequest> choices;
  for (int i = 0; i < job->n; ++i) {
    engine::GenerateRequest r = job->request;
    r.id = id + "-" + std::to_string(i);
    if (r.sampling.has_seed) r.sampling.seed += static_cast<uint64_t>(i);
    choices.push_back(std::move(r));
  }
  HttpStream stream(*job, *engine_, w, id, created, model);
  std::string field;
  auto run = generation_->Run(endpoint, std::move(choices), deadline, stream, &field, 0, caller.tenant);
  if (!run.ok()) {
    w.Send(StatusResponse(run.status(), field == "prompt" && chat ? "messages" : field));
    return;
  }
  const GenerationResult& result = *run;
  if (result.outcome == Outcome::kAborted) return;  // nobody to answer
  if (job->stream) {
    if (!stream.Begin()) return;
    if (job->include_usage) {
      engine::Usage usage;
      for (const auto& f : result.finals) {
        usage.prompt_tokens = f.usage.prompt_tokens;
        usage.completion_tokens += f.usage.completion_tokens;
        usage.cached_prompt_tokens = f.usage.cached_prompt_tokens;
      }
      w.SendEvent(SseData(UsageChunk(*job, id, created, model, usage)));
    }
    w.SendEvent("data: [DONE]\n\n");
    w.EndStream();
    return;
  }
  if (result.outcome == Outcome::kError || result.outcome == Outcome::kTimeout) {
    w.Send(StatusResponse(result.error));
    return;
  }
  w.Send(JsonResponse(http::status::ok, CompletionResponse(*job, id, created, model, stream.texts(), result.finals,
                                                           stream.tokens(), *engine_)
                                            .dump(-1, ' ', false, json::error_handler_t::replace)));
}

}  // namespace tq::server
