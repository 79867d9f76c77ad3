#include "server/http/routes.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <ctime>
#include <random>

#include "common/build_info.h"
#include "engine/runner/text_stream.h"
#include "server/event_channel.h"
#include "server/http/kv_state.h"
#include "server/http/web_ui.h"
#include "server/request_deadline.h"

namespace tq::server {
namespace {

using nlohmann::json;

http::status HttpStatusOf(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange: return http::status::bad_request;
    case StatusCode::kNotFound: return http::status::not_found;
    case StatusCode::kResourceExhausted: return http::status::too_many_requests;
    case StatusCode::kUnavailable: return http::status::service_unavailable;
    case StatusCode::kUnauthenticated: return http::status::unauthorized;
    case StatusCode::kPermissionDenied: return http::status::forbidden;
    case StatusCode::kDeadlineExceeded: return http::status::gateway_timeout;
    case StatusCode::kUnimplemented: return http::status::not_implemented;
    default: return http::status::internal_server_error;
  }
}

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

HttpResponse StatusResponse(const Status& s, std::string_view param = "") {
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

std::string SseData(const json& j) {
  return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace

Router::Router(RouterOptions options, engine::Engine* engine, Metrics* metrics, ServerState* state)
    : options_(std::move(options)), engine_(engine), metrics_(metrics), state_(state) {}

bool Router::Authorized(const HttpRequest& req) const {
  if (options_.api_keys.empty()) return true;
  const auto it = req.find(http::field::authorization);
  if (it == req.end()) return false;
  const std::string_view value(it->value().data(), it->value().size());
  constexpr std::string_view kBearer = "Bearer ";
  if (!value.starts_with(kBearer)) return false;
  const std::string_view key = value.substr(kBearer.size());
  for (const std::string& k : options_.api_keys) {
    if (k == key) return true;
  }
  return false;
}

void Router::Handle(const HttpRequest& req, ResponseWriter& w) {
  const std::string_view target(req.target().data(), req.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
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
  if (path == "/metrics" && get) {
    HttpResponse r{http::status::ok, 11};
    r.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
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
  const bool known = path == "/v1/completions" || path == "/v1/chat/completions" || path == "/v1/models" ||
                     path == "/tokenize" || path == "/detokenize" || path == "/kv/state";
  if (!known) {
    w.Send(ErrorResponse(http::status::not_found, "no route for " + std::string(path), "not_found_error"));
    return;
  }
  if (!Authorized(req)) {
    metrics_->CountRequest(path, "unauthorized");
    w.Send(ErrorResponse(http::status::unauthorized, "a valid API key is required (Authorization: Bearer KEY)",
                         "authentication_error"));
    return;
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
  Completions(req, w, path == "/v1/chat/completions");
}

void Router::Models(ResponseWriter& w) {
  json model{{"id", options_.api.model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "tqserve"},
             {"max_model_len", options_.api.ctx_size}};
  w.Send(JsonResponse(http::status::ok, json{{"object", "list"}, {"data", json::array({model})}}.dump()));
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
  if (!engine::IsValidUtf8(s)) {
    w.Send(ErrorResponse(http::status::bad_request, "'content' is not valid UTF-8", "invalid_request_error",
                         "content"));
    return;
  }
  const auto ids = engine_->tokenizer().Encode(s, {.add_special = add_special, .parse_special = true});
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
  const int32_t vocab = engine_->tokenizer().vocab_size();
  for (const json& t : (*body)["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab) {
      w.Send(ErrorResponse(http::status::bad_request,
                           "token ids must be integers in [0, " + std::to_string(vocab) + ")",
                           "invalid_request_error", "tokens"));
      return;
    }
    ids.push_back(t.get<int32_t>());
  }
  const std::string text = engine_->tokenizer().Decode(ids);
  w.Send(JsonResponse(http::status::ok,
                      json{{"content", SanitizeUtf8(text)}}.dump(-1, ' ', false, json::error_handler_t::replace)));
}

void Router::Completions(const HttpRequest& req, ResponseWriter& w, bool chat) {
  const std::string endpoint = chat ? "/v1/chat/completions" : "/v1/completions";
  RequestDeadline deadline(options_.request_timeout_s);
  if (state_->draining) {
    metrics_->CountRequest(endpoint, "rejected");
    w.Send(ErrorResponse(http::status::service_unavailable, "the server is draining", "service_unavailable"));
    return;
  }
  auto body = ParseJson(req, w);
  if (!body) {
    metrics_->CountRequest(endpoint, "invalid");
    return;
  }
  ParseError perr;
  auto job = ParseCompletionRequest(*body, chat, options_.api, &perr);
  if (!job) {
    metrics_->CountRequest(endpoint, "invalid");
    w.Send(StatusResponse(perr.status, perr.param));
    return;
  }
  // Concurrency limit: count first, then check, so two racing requests cannot both slip past.
  const int now_in_flight = ++state_->in_flight;
  struct Release {
    ServerState* s;
    ~Release() { --s->in_flight; }
  } release{state_};
  if (options_.max_concurrent_requests > 0 && now_in_flight > options_.max_concurrent_requests) {
    metrics_->CountRequest(endpoint, "rejected");
    w.Send(ErrorResponse(http::status::too_many_requests,
                         "too many concurrent requests (limit " + std::to_string(options_.max_concurrent_requests) +
                             ")",
                         "rate_limit_error"));
    return;
  }

  const std::string id = NewId(chat ? "chatcmpl-" : "cmpl-");
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  const std::string& model = options_.api.model_id;
  auto channel = std::make_shared<EventChannel>();
  std::vector<std::string> request_ids;
  for (int i = 0; i < job->n; ++i) {
    engine::GenerateRequest r = job->request;
    r.id = id + "-" + std::to_string(i);
    if (r.sampling.has_seed) r.sampling.seed += static_cast<uint64_t>(i);
    Status s = engine_->Submit(std::move(r), EventChannel::SinkFor(channel, i));
    if (!s.ok()) {
      for (const std::string& rid : request_ids) engine_->Abort(rid);
      metrics_->CountRequest(endpoint, "rejected");
      w.Send(StatusResponse(s));
      return;
    }
    request_ids.push_back(id + "-" + std::to_string(i));
  }

  const auto abort_all = [&] {
    for (const std::string& rid : request_ids) engine_->Abort(rid);
  };
  std::vector<std::string> texts(job->n);
  std::vector<std::vector<engine::GeneratedToken>> tokens(job->n);
  std::vector<engine::GenerateEvent> finals(job->n);
  std::vector<bool> started(job->n, false);
  int open = job->n;
  bool client_gone = false;
  bool timed_out = false;  // the deadline passed and the choices still open were aborted
  if (job->stream && !w.StartStream()) client_gone = true;
  auto last_check = std::chrono::steady_clock::now();
  while (open > 0) {
    auto item = channel->Pop(deadline.WaitAtMost(std::chrono::milliseconds(100)));
    if (!timed_out && !client_gone && deadline.Expired()) {
      timed_out = true;
      abort_all();
      spdlog::info("{}: request time limit of {} s reached; aborted", id, options_.request_timeout_s);
    }
    // Look for a departed client at most every 100 ms, whether events flow or not.
    const auto now = std::chrono::steady_clock::now();
    if (!client_gone && (!item || now - last_check > std::chrono::milliseconds(100))) {
      last_check = now;
      if (w.ClientGone()) {
        client_gone = true;
        abort_all();
      }
    }
    if (!item) continue;
    engine::GenerateEvent& ev = item->event;
    const int c = item->choice;
    // A choice the deadline aborted reports "timeout"; one that ended on its own first keeps its reason.
    const bool choice_timed_out = ev.final && timed_out && ev.finish_reason == engine::FinishReason::kAborted;
    if (ev.final) {
      --open;
      metrics_->ObserveFinished(ev);
    }
    if (job->stream) {
      if (!client_gone) {
        std::string reason = choice_timed_out ? "timeout" : ev.final ? OpenAiFinishReason(ev.finish_reason) : "";
        const bool ok = w.SendEvent(
            SseData(StreamChunk(*job, id, created, model, c, ev.text, ev.tokens, reason, !started[c],
                                engine_->tokenizer())));
        started[c] = true;
        if (!ok) {
          client_gone = true;
          abort_all();
        }
      }
    } else {
      texts[c] += ev.text;
      if (job->logprobs) tokens[c].insert(tokens[c].end(), ev.tokens.begin(), ev.tokens.end());
    }
    if (ev.final) finals[c] = std::move(ev);
  }
  if (client_gone) {
    metrics_->CountRequest(endpoint, "aborted");
    spdlog::info("{}: client went away; aborted {} choice(s)", id, job->n);
    return;
  }
  bool failed = false;
  bool expired = false;
  for (const auto& f : finals) {
    failed |= f.finish_reason == engine::FinishReason::kError;
    expired |= timed_out && f.finish_reason == engine::FinishReason::kAborted;
  }
  metrics_->CountRequest(endpoint, failed ? "error" : expired ? "timeout" : "success");
  if (job->stream) {
    if (job->include_usage) {
      engine::Usage usage;
      for (const auto& f : finals) {
        usage.prompt_tokens = f.usage.prompt_tokens;
        usage.completion_tokens += f.usage.completion_tokens;
      }
      w.SendEvent(SseData(UsageChunk(*job, id, created, model, usage)));
    }
    w.SendEvent("data: [DONE]\n\n");
    w.EndStream();
    return;
  }
  if (expired && !failed) {
    w.Send(ErrorResponse(http::status::gateway_timeout,
                         "the request did not finish within the server's time limit of " +
                             fmt::format("{}", options_.request_timeout_s) + " s (limits.request_timeout_s)",
                         "timeout_error"));
    return;
  }
  if (failed) {
    for (const auto& f : finals) {
      if (!f.error.ok()) {
        w.Send(StatusResponse(f.error));
        return;
      }
    }
  }
  w.Send(JsonResponse(http::status::ok, CompletionResponse(*job, id, created, model, texts, finals, tokens,
                                                           engine_->tokenizer())
                                            .dump(-1, ' ', false, json::error_handler_t::replace)));
}

}  // namespace tq::server
