#include "server/grpc/inference_service.h"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <random>

#include "common/build_info.h"
#include "server/event_channel.h"
#include "server/request_deadline.h"

namespace tq::server {
namespace {

namespace v1 = tqserve::v1;

std::string NewRequestId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[24];
  std::snprintf(buf, sizeof buf, "grpc-%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

v1::FinishReason ToProto(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::kStop: return v1::FINISH_REASON_STOP;
    case engine::FinishReason::kLength: return v1::FINISH_REASON_LENGTH;
    case engine::FinishReason::kAborted: return v1::FINISH_REASON_ABORTED;
    case engine::FinishReason::kShutdown: return v1::FINISH_REASON_SHUTDOWN;
    case engine::FinishReason::kNone:
    case engine::FinishReason::kError: return v1::FINISH_REASON_UNSPECIFIED;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

}  // namespace

grpc::Status ToGrpc(const Status& s) {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  switch (s.code()) {
    case StatusCode::kOk: return grpc::Status::OK;
    case StatusCode::kInvalidArgument: code = grpc::StatusCode::INVALID_ARGUMENT; break;
    case StatusCode::kNotFound: code = grpc::StatusCode::NOT_FOUND; break;
    case StatusCode::kAlreadyExists: code = grpc::StatusCode::ALREADY_EXISTS; break;
    case StatusCode::kOutOfRange: code = grpc::StatusCode::OUT_OF_RANGE; break;
    case StatusCode::kResourceExhausted: code = grpc::StatusCode::RESOURCE_EXHAUSTED; break;
    case StatusCode::kFailedPrecondition: code = grpc::StatusCode::FAILED_PRECONDITION; break;
    case StatusCode::kUnavailable: code = grpc::StatusCode::UNAVAILABLE; break;
    case StatusCode::kDataLoss: code = grpc::StatusCode::DATA_LOSS; break;
    case StatusCode::kIoError: code = grpc::StatusCode::INTERNAL; break;
    case StatusCode::kUnimplemented: code = grpc::StatusCode::UNIMPLEMENTED; break;
    case StatusCode::kCancelled: code = grpc::StatusCode::CANCELLED; break;
    case StatusCode::kDeadlineExceeded: code = grpc::StatusCode::DEADLINE_EXCEEDED; break;
    case StatusCode::kPermissionDenied: code = grpc::StatusCode::PERMISSION_DENIED; break;
    case StatusCode::kUnauthenticated: code = grpc::StatusCode::UNAUTHENTICATED; break;
    case StatusCode::kInternal: code = grpc::StatusCode::INTERNAL; break;
  }
  return grpc::Status(code, s.message());
}

InferenceService::InferenceService(ApiContext api, std::vector<std::string> api_keys, double request_timeout_s,
                                   engine::Engine* engine, Metrics* metrics, ServerState* state)
    : api_(std::move(api)),
      api_keys_(std::move(api_keys)),
      request_timeout_s_(request_timeout_s),
      engine_(engine),
      metrics_(metrics),
      state_(state) {}

grpc::Status InferenceService::CheckKey(grpc::ServerContext* context) const {
  if (api_keys_.empty()) return grpc::Status::OK;
  const auto& md = context->client_metadata();
  auto it = md.find("authorization");
  if (it != md.end()) {
    const std::string value(it->second.data(), it->second.size());
    for (const std::string& k : api_keys_) {
      if (value == "Bearer " + k) return grpc::Status::OK;
    }
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "a valid API key is required (metadata authorization: Bearer KEY)");
}

grpc::Status InferenceService::Generate(grpc::ServerContext* context, const v1::GenerateRequest* in,
                                        grpc::ServerWriter<v1::GenerateResponse>* writer) {
  RequestDeadline deadline(request_timeout_s_);
  deadline.Tighten(context->deadline());
  if (auto s = CheckKey(context); !s.ok()) return s;
  if (state_->draining) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is draining");
  if (!in->model().empty() && in->model() != api_.model_id) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "model '" + in->model() + "' is not served here");
  }
  engine::GenerateRequest r;
  r.id = in->request_id().empty() ? NewRequestId() : in->request_id();
  switch (in->input_case()) {
    case v1::GenerateRequest::kPrompt:
      r.prompt = engine_->tokenizer().Encode(in->prompt(), {.add_special = true, .parse_special = false});
      break;
    case v1::GenerateRequest::kPromptTokens:
      r.prompt.assign(in->prompt_tokens().ids().begin(), in->prompt_tokens().ids().end());
      break;
    case v1::GenerateRequest::kMessages: {
      if (api_.chat == nullptr) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "this model has no usable chat template");
      }
      std::vector<engine::ChatMessage> messages;
      for (const auto& m : in->messages().messages()) messages.push_back({m.role(), m.content()});
      auto text = engine::RenderChat(*api_.chat, messages);
      if (!text.ok()) return ToGrpc(text.status());
      r.prompt = engine_->tokenizer().Encode(*text, {.add_special = true, .parse_special = true});
      break;
    }
    case v1::GenerateRequest::INPUT_NOT_SET:
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "one of prompt, prompt_tokens or messages is required");
  }
  const v1::SamplingParams& sp = in->sampling();
  if (sp.has_temperature()) r.sampling.temperature = sp.temperature();
  if (sp.has_top_p()) r.sampling.top_p = sp.top_p();
  if (sp.has_top_k()) r.sampling.top_k = sp.top_k();
  if (sp.has_min_p()) r.sampling.min_p = sp.min_p();
  if (sp.has_repetition_penalty()) r.sampling.repetition_penalty = sp.repetition_penalty();
  if (sp.has_frequency_penalty()) r.sampling.frequency_penalty = sp.frequency_penalty();
  if (sp.has_presence_penalty()) r.sampling.presence_penalty = sp.presence_penalty();
  if (sp.has_seed()) {
    r.sampling.seed = sp.seed();
    r.sampling.has_seed = true;
  }
  r.max_tokens = sp.has_max_tokens() ? sp.max_tokens() : api_.limits.default_max_tokens;
  if (api_.limits.max_tokens > 0 && r.max_tokens > api_.limits.max_tokens) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "max_tokens exceeds this server's limit of " + std::to_string(api_.limits.max_tokens));
  }
  r.stop.assign(sp.stop().begin(), sp.stop().end());
  r.stop_tokens.assign(sp.stop_token_ids().begin(), sp.stop_token_ids().end());
  r.ignore_eos = sp.ignore_eos();
  r.logprobs = sp.logprobs();
  r.top_logprobs = sp.top_logprobs();
  r.priority = in->priority();
  const int max_prompt = api_.limits.max_prompt_tokens > 0 ? api_.limits.max_prompt_tokens : api_.ctx_size - 1;
  if (static_cast<int>(r.prompt.size()) > max_prompt) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the prompt has " + std::to_string(r.prompt.size()) +
                                                                " tokens; the limit is " + std::to_string(max_prompt));
  }

  // limits.max_concurrent_requests counts HTTP and gRPC generations together: count first, then check.
  const int now_in_flight = ++state_->in_flight;
  struct Release {
    ServerState* s;
    ~Release() { --s->in_flight; }
  } release{state_};
  if (max_concurrent_requests_ > 0 && now_in_flight > max_concurrent_requests_) {
    metrics_->CountRequest("grpc.Generate", "rejected");
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "too many concurrent requests (limit " + std::to_string(max_concurrent_requests_) + ")");
  }
  const std::string id = r.id;
  auto channel = std::make_shared<EventChannel>();
  if (Status s = engine_->Submit(std::move(r), EventChannel::SinkFor(channel, 0)); !s.ok()) {
    metrics_->CountRequest("grpc.Generate", "rejected");
    return ToGrpc(s);
  }
  bool aborted = false;
  bool timed_out = false;  // aborted because the server's limit or the client's deadline passed
  for (;;) {
    auto item = channel->Pop(deadline.WaitAtMost(std::chrono::milliseconds(100)));
    if (!aborted && deadline.Expired()) {
      aborted = timed_out = true;
      engine_->Abort(id);
    }
    if (!aborted && context->IsCancelled()) {
      aborted = true;
      spdlog::info("gRPC Generate {}: the client cancelled the call; aborting it (found: {})", id,
                   engine_->Abort(id));
    }
    if (!item) continue;
    engine::GenerateEvent& ev = item->event;
    if (!ev.tokens.empty() || !ev.text.empty()) {
      v1::GenerateResponse chunk;
      auto* c = chunk.mutable_chunk();
      c->set_text(SanitizeUtf8(ev.text));
      for (const auto& t : ev.tokens) {
        c->add_token_ids(t.id);
        if (in->sampling().logprobs()) {
          auto* lp = c->add_logprobs();
          lp->set_token_id(t.id);
          lp->set_text(SanitizeUtf8(engine_->tokenizer().TokenToPiece(t.id)));
          lp->set_logprob(t.logprob);
          for (const auto& alt : t.top) {
            auto* top = lp->add_top();
            top->set_token_id(alt.token);
            top->set_text(SanitizeUtf8(engine_->tokenizer().TokenToPiece(alt.token)));
            top->set_logprob(alt.logprob);
          }
        }
      }
      if (!aborted && !writer->Write(chunk)) {
        aborted = true;
        spdlog::info("gRPC Generate {}: the stream is closed; aborting the request (found: {})", id,
                     engine_->Abort(id));
      }
    }
    if (!ev.final) continue;
    metrics_->ObserveFinished(ev);
    if (ev.finish_reason == engine::FinishReason::kError) {
      metrics_->CountRequest("grpc.Generate", "error");
      return ToGrpc(ev.error);
    }
    // A client deadline also cancels the call in gRPC, possibly a moment before our clock sees it pass.
    if (aborted && ev.finish_reason == engine::FinishReason::kAborted && (timed_out || deadline.Expired())) {
      metrics_->CountRequest("grpc.Generate", "timeout");
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          deadline.by_client() ? "the call's deadline passed before generation finished"
                                               : "the request did not finish within the server's time limit of " +
                                                     fmt::format("{}", request_timeout_s_) +
                                                     " s (limits.request_timeout_s)");
    }
    if (aborted) {
      metrics_->CountRequest("grpc.Generate", "aborted");
      return grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the call");
    }
    v1::GenerateResponse last;
    auto* f = last.mutable_final();
    f->set_finish_reason(ToProto(ev.finish_reason));
    f->set_request_id(id);
    f->mutable_usage()->set_prompt_tokens(ev.usage.prompt_tokens);
    f->mutable_usage()->set_completion_tokens(ev.usage.completion_tokens);
    f->mutable_usage()->set_cached_prompt_tokens(ev.usage.cached_prompt_tokens);
    f->mutable_timings()->set_queue_seconds(ev.timings.queue_seconds);
    f->mutable_timings()->set_time_to_first_token_seconds(ev.timings.time_to_first_token_seconds);
    f->mutable_timings()->set_total_seconds(ev.timings.total_seconds);
    f->mutable_timings()->set_prompt_tokens_per_second(ev.timings.prompt_tokens_per_second);
    f->mutable_timings()->set_generated_tokens_per_second(ev.timings.generated_tokens_per_second);
    writer->Write(last);
    metrics_->CountRequest("grpc.Generate", "success");
    return grpc::Status::OK;
  }
}

grpc::Status InferenceService::Tokenize(grpc::ServerContext* context, const v1::TokenizeRequest* in,
                                        v1::TokenizeResponse* out) {
  if (auto s = CheckKey(context); !s.ok()) return s;
  for (int32_t id : engine_->tokenizer().Encode(in->text(), {.add_special = in->add_special(), .parse_special = true})) {
    out->add_ids(id);
  }
  return grpc::Status::OK;
}

grpc::Status InferenceService::Detokenize(grpc::ServerContext* context, const v1::DetokenizeRequest* in,
                                          v1::DetokenizeResponse* out) {
  if (auto s = CheckKey(context); !s.ok()) return s;
  std::vector<int32_t> ids(in->ids().begin(), in->ids().end());
  for (int32_t id : ids) {
    if (id < 0 || id >= engine_->tokenizer().vocab_size()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "token id " + std::to_string(id) + " is outside the vocabulary");
    }
  }
  out->set_text(SanitizeUtf8(engine_->tokenizer().Decode(ids)));
  return grpc::Status::OK;
}

grpc::Status InferenceService::GetModelInfo(grpc::ServerContext* context, const v1::GetModelInfoRequest*,
                                            v1::ModelInfo* out) {
  if (auto s = CheckKey(context); !s.ok()) return s;
  const engine::HParams& hp = engine_->model().hparams();
  out->set_id(api_.model_id);
  out->set_architecture(std::string(hp.arch->name));
  out->set_n_layers(hp.n_layers);
  out->set_n_heads(hp.n_heads);
  out->set_n_kv_heads(hp.n_kv_heads);
  out->set_head_dim(hp.head_dim);
  out->set_context_length(engine_->ctx_size());
  out->set_vocab_size(hp.vocab_size);
  out->set_has_chat_template(api_.chat != nullptr);
  out->set_weight_bytes(engine_->model().weight_bytes());
  return grpc::Status::OK;
}

grpc::Status InferenceService::GetServerInfo(grpc::ServerContext* context, const v1::GetServerInfoRequest*,
                                             v1::ServerInfo* out) {
  if (auto s = CheckKey(context); !s.ok()) return s;
  const engine::EngineStats st = engine_->Stats();
  out->set_version(std::string(GetBuildInfo().version));
  out->set_running_requests(st.running);
  out->set_waiting_requests(st.waiting);
  out->set_ready(state_->ready && !state_->draining);
  out->set_draining(state_->draining);
  for (int t = 0; t < engine::kKvTiers; ++t) {
    const engine::KvTierUsage& u = st.kv_store.tiers[t];
    if (!u.present) continue;
    auto* tier = out->add_tiers();
    tier->set_tier(std::string(engine::KvTierName(static_cast<engine::KvTier>(t))));
    tier->set_bytes_used(u.bytes);
    tier->set_bytes_capacity(u.capacity_bytes);
    tier->set_pages(u.pages);
  }
  const std::vector<engine::HeadPlacement> heads = engine_->HeadPlacements();
  const auto class_name = [](engine::PrecisionClass c) {
    std::string name(engine::PrecisionClassName(c));
    for (char& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    return name;
  };
  for (int c = 0; c < 3; ++c) {
    auto* cls = out->add_classes();
    cls->set_precision_class(class_name(static_cast<engine::PrecisionClass>(c)));
    // The class's formats as configured; the first head of the class tells.
    for (const engine::HeadPlacement& h : heads) {
      if (static_cast<int>(h.cls) != c) continue;
      cls->set_format(h.format);
      break;
    }
    cls->set_heads(st.kv_class_heads[c]);
    cls->set_bytes(st.kv_store.class_bytes[c]);
  }
  for (const engine::HeadPlacement& h : heads) {
    auto* head = out->add_heads();
    head->set_layer(h.layer);
    head->set_kv_head(h.kv_head);
    head->set_precision_class(class_name(h.cls));
    head->set_tier(std::string(engine::KvTierName(h.tier)));
    head->set_format(h.format);
  }
  return grpc::Status::OK;
}

grpc::Status InferenceService::Abort(grpc::ServerContext* context, const v1::AbortRequest* in, v1::AbortResponse* out) {
  if (auto s = CheckKey(context); !s.ok()) return s;
  out->set_found(engine_->Abort(in->request_id()));
  return grpc::Status::OK;
}

grpc::Status InferenceService::SubscribeKvEvents(grpc::ServerContext* context, const v1::SubscribeKvEventsRequest* in,
                                                 grpc::ServerWriter<v1::KvEvent>* writer) {
  if (auto s = CheckKey(context); !s.ok()) return s;
  const engine::KvPageStore& store = engine_->kv_store();
  // from_sequence 0: only new events; otherwise replay from that number (or from the oldest still held).
  uint64_t after = in->from_sequence() == 0 ? store.last_event() : in->from_sequence() - 1;
  while (!context->IsCancelled()) {
    uint64_t first = 0;
    const std::vector<engine::KvEvent> events = store.EventsSince(after, 256, 200, &first);
    for (const engine::KvEvent& e : events) {
      v1::KvEvent msg;
      msg.set_sequence_number(e.seq);
      switch (e.kind) {
        case engine::KvEvent::Kind::kStored: msg.set_kind(v1::KV_EVENT_KIND_STORED); break;
        case engine::KvEvent::Kind::kMoved: msg.set_kind(v1::KV_EVENT_KIND_MOVED); break;
        case engine::KvEvent::Kind::kEvicted: msg.set_kind(v1::KV_EVENT_KIND_EVICTED); break;
      }
      msg.set_page_id(e.page);
      msg.set_request_id(e.info.owner);
      msg.set_layer(e.info.layer);
      msg.set_kv_head(e.info.kv_head);
      msg.set_tier(std::string(engine::KvTierName(e.tier)));
      if (e.kind == engine::KvEvent::Kind::kMoved) msg.set_from_tier(std::string(engine::KvTierName(e.from)));
      msg.set_format(kernels::FormatPairName(e.info.k, e.info.v));
      msg.set_bytes(e.bytes);
      msg.set_unix_seconds(e.unix_seconds);
      if (!writer->Write(msg)) return grpc::Status::OK;  // the client went away
      after = e.seq;
    }
  }
  return grpc::Status::OK;
}

}  // namespace tq::server
