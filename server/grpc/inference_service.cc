#include "server/grpc/inference_service.h"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <random>

#include "common/build_info.h"
#include "server/grpc/generate_request.h"
#include "server/request_options.h"

namespace tq::server {
namespace {

namespace v1 = tqserve::v1;

// After shutdown closed the engine gate (server/engine_gate.h).
grpc::Status ShuttingDown() { return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down"); }

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

InferenceService::InferenceService(ApiContext api, const ApiKeys* api_keys, engine::EngineApi* engine,
                                   Generation* generation, Metrics* metrics, ServerState* state)
    : api_(std::move(api)),
      api_keys_(api_keys),
      engine_(engine),
      generation_(generation),
      metrics_(metrics),
      state_(state) {}

Caller InferenceService::CallerOf(grpc::ServerContext* context) const {
  if (api_keys_ == nullptr) return {true, true, ""};
  const auto& md = context->client_metadata();
  auto it = md.find("authorization");
  const std::string_view value =
      it == md.end() ? std::string_view() : std::string_view(it->second.data(), it->second.size());
  return api_keys_->Identify(value);
}

grpc::Status InferenceService::CheckKey(grpc::ServerContext* context) const {
  if (CallerOf(context).accepted) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "a valid API key is required (metadata authorization: Bearer KEY)");
}

namespace {

// One Generate call's view of its generation: a chunk per event, written as it comes.
class GrpcStream final : public GenerationStream {
 public:
  GrpcStream(grpc::ServerContext* context, grpc::ServerWriter<v1::GenerateResponse>* writer, bool logprobs,
             const engine::EngineApi& engine, const ToolJob& tools)
      : context_(context), writer_(writer), logprobs_(logprobs), engine_(engine), tools_(tools), filter_(tools) {}

  bool ClientGone() override { return context_->IsCancelled(); }

  // With tools: the calls the output held (after the final event).
  std::vector<engine::ToolCall>& calls() { return calls_; }

  bool OnEvent(int, const engine::GenerateEvent& ev, bool) override {
    std::string text = ev.text;
    if (tools_.active()) {
      text = filter_.Push(ev.text);
      if (ev.final) {
        ToolCallFilter::End end = filter_.Finish();
        text += end.content;
        calls_ = std::move(end.calls);
      }
    }
    if (ev.tokens.empty() && text.empty()) return true;
    v1::GenerateResponse chunk;
    auto* c = chunk.mutable_chunk();
    c->set_text(SanitizeUtf8(text));
    for (const auto& t : ev.tokens) {
      c->add_token_ids(t.id);
      if (!logprobs_) continue;
      auto* lp = c->add_logprobs();
      lp->set_token_id(t.id);
      lp->set_text(SanitizeUtf8(engine_.TokenText(t.id)));
      lp->set_logprob(t.logprob);
      for (const auto& alt : t.top) {
        auto* top = lp->add_top();
        top->set_token_id(alt.token);
        top->set_text(SanitizeUtf8(engine_.TokenText(alt.token)));
        top->set_logprob(alt.logprob);
      }
    }
    return writer_->Write(chunk);
  }

 private:
  grpc::ServerContext* context_;
  grpc::ServerWriter<v1::GenerateResponse>* writer_;
  bool logprobs_;
  const engine::EngineApi& engine_;
  const ToolJob& tools_;
  ToolCallFilter filter_;
  std::vector<engine::ToolCall> calls_;
};

}  // namespace

grpc::Status InferenceService::Generate(grpc::ServerContext* context, const v1::GenerateRequest* in,
                                        grpc::ServerWriter<v1::GenerateResponse>* writer) {
  const EngineGate::Use use = state_->engine_gate.Enter();
  if (!use) return ShuttingDown();
  RequestDeadline deadline(generation_->limits().request_timeout_s);
  deadline.Tighten(context->deadline());
  const Caller caller = CallerOf(context);
  if (auto s = CheckKey(context); !s.ok()) return s;
  if (state_->draining) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is draining");
  auto decoded = DecodeGenerateRequest(*in, caller, api_.model_id, api_.vocab_size, generation_->limits(), *engine_,
                                       NewRequestId());
  if (!decoded.ok()) return ToGrpc(decoded.status());
  engine::GenerateRequest& r = decoded->request;
  const ToolJob& tools = decoded->tools;
  const v1::SamplingParams& sp = in->sampling();

  const std::string id = r.id;
  std::vector<engine::GenerateRequest> choices;
  choices.push_back(std::move(r));
  GrpcStream stream(context, writer, sp.logprobs(), *engine_, tools);
  auto run = generation_->Run("grpc.Generate", std::move(choices), deadline, stream, nullptr, 0, caller.tenant);
  if (!run.ok()) return ToGrpc(run.status());
  const GenerationResult& result = *run;
  switch (result.outcome) {
    case Outcome::kError:
    case Outcome::kTimeout: return ToGrpc(result.error);
    case Outcome::kAborted: return grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the call");
    case Outcome::kSuccess:
    case Outcome::kShutdown: break;
  }
  const engine::GenerateEvent& ev = result.finals.front();
  v1::GenerateResponse last;
  auto* f = last.mutable_final();
  f->set_finish_reason(ToProto(ev.finish_reason));
  for (const engine::ToolCall& c : stream.calls()) {
    auto* call = f->add_tool_calls();
    call->set_id(c.id);
    call->set_name(c.name);
    call->set_arguments(c.arguments);
  }
  if (!stream.calls().empty() && ev.finish_reason == engine::FinishReason::kStop) {
    f->set_finish_reason(v1::FINISH_REASON_TOOL_CALLS);
  }
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
  return grpc::Status::OK;
}

namespace {

// An Embed call's view of its inputs' generation: nothing streams; the embeddings are in the final events.
class EmbedStream final : public GenerationStream {
 public:
  explicit EmbedStream(grpc::ServerContext* context) : context_(context) {}
  bool ClientGone() override { return context_->IsCancelled(); }
  bool OnEvent(int, const engine::GenerateEvent&, bool) override { return true; }

 private:
  grpc::ServerContext* context_;
};

}  // namespace

grpc::Status InferenceService::Embed(grpc::ServerContext* context, const v1::EmbedRequest* in,
                                     v1::EmbedResponse* out) {
  const EngineGate::Use use = state_->engine_gate.Enter();
  if (!use) return ShuttingDown();
  RequestDeadline deadline(generation_->limits().request_timeout_s);
  deadline.Tighten(context->deadline());
  const Caller caller = CallerOf(context);
  if (auto s = CheckKey(context); !s.ok()) return s;
  if (!in->model().empty() && in->model() != api_.model_id) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "model '" + in->model() + "' is not served here");
  }
  if ((in->texts_size() > 0) == (in->token_inputs_size() > 0)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "one of texts or token_inputs is required");
  }
  const int n = std::max(in->texts_size(), in->token_inputs_size());
  if (n > generation_->limits().max_embedding_inputs) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "at most " + std::to_string(generation_->limits().max_embedding_inputs) + " inputs are allowed");
  }
  const std::string id = NewRequestId();
  std::vector<engine::GenerateRequest> inputs;
  for (int i = 0; i < n; ++i) {
    engine::GenerateRequest r;
    r.id = id + "-" + std::to_string(i);
    if (in->texts_size() > 0) {
      if (in->texts(i).empty() || !IsValidUtf8(in->texts(i))) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "texts must be non-empty valid UTF-8");
      }
      r.prompt = engine_->Tokenize(in->texts(i), {.add_special = true, .parse_special = false});
    } else {
      r.prompt.assign(in->token_inputs(i).ids().begin(), in->token_inputs(i).ids().end());
      for (int32_t t : r.prompt) {
        if (t < 0 || t >= api_.vocab_size) {
          return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              "token id " + std::to_string(t) + " is outside the vocabulary");
        }
      }
    }
    r.embed = true;
    r.max_tokens = 1;
    r.cache_salt = TenantCacheSalt(caller.tenant, "");
    inputs.push_back(std::move(r));
  }
  EmbedStream stream(context);
  auto run = generation_->Run("grpc.Embed", std::move(inputs), deadline, stream, nullptr,
                              generation_->limits().max_embedding_inputs, caller.tenant);
  if (!run.ok()) return ToGrpc(run.status());
  switch (run->outcome) {
    case Outcome::kSuccess: break;
    case Outcome::kAborted: return grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the call");
    case Outcome::kShutdown: return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server shut down");
    case Outcome::kError:
    case Outcome::kTimeout: return ToGrpc(run->error);
  }
  int prompt_tokens = 0;
  for (const engine::GenerateEvent& ev : run->finals) {
    out->add_embeddings()->mutable_values()->Add(ev.embedding.begin(), ev.embedding.end());
    prompt_tokens += ev.usage.prompt_tokens;
  }
  out->mutable_usage()->set_prompt_tokens(prompt_tokens);
  return grpc::Status::OK;
}

grpc::Status InferenceService::Tokenize(grpc::ServerContext* context, const v1::TokenizeRequest* in,
                                        v1::TokenizeResponse* out) {
  const EngineGate::Use use = state_->engine_gate.Enter();
  if (!use) return ShuttingDown();
  if (auto s = CheckKey(context); !s.ok()) return s;
  for (int32_t id : engine_->Tokenize(in->text(), {.add_special = in->add_special(), .parse_special = true})) {
    out->add_ids(id);
  }
  return grpc::Status::OK;
}

grpc::Status InferenceService::Detokenize(grpc::ServerContext* context, const v1::DetokenizeRequest* in,
                                          v1::DetokenizeResponse* out) {
  const EngineGate::Use use = state_->engine_gate.Enter();
  if (!use) return ShuttingDown();
  if (auto s = CheckKey(context); !s.ok()) return s;
  const std::vector<int32_t> ids(in->ids().begin(), in->ids().end());
  auto text = engine_->Detokenize(ids);
  if (!text.ok()) return ToGrpc(text.status());
  out->set_text(SanitizeUtf8(*text));
  return grpc::Status::OK;
}

grpc::Status InferenceService::GetModelInfo(grpc::ServerContext* context, const v1::GetModelInfoRequest*,
                                            v1::ModelInfo* out) {
  const EngineGate::Use use = state_->engine_gate.Enter();
  if (!use) return ShuttingDown();
  if (auto s = CheckKey(context); !s.ok()) return s;
  const engine::ModelInfo info = engine_->Info();
  out->set_id(api_.model_id);
  out->set_architecture(info.architecture);
  out->set_n_layers(info.n_layers);
  out->set_n_heads(info.n_heads);
  out->set_n_kv_heads(info.n_kv_heads);
  out->set_head_dim(info.head_dim);
  out->set_context_length(info.context_length);
  out->set_vocab_size(info.vocab_size);
  out->set_has_chat_template(!info.chat_format.empty());
  out->set_weight_bytes(info.weight_bytes);
  return grpc::Status::OK;
}

grpc::Status InferenceService::GetServerInfo(grpc::ServerContext* context, const v1::GetServerInfoRequest*,
                                             v1::ServerInfo* out) {
  const EngineGate::Use use = state_->engine_gate.Enter();
  if (!use) return ShuttingDown();
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
  const EngineGate::Use use = state_->engine_gate.Enter();
  if (!use) return ShuttingDown();
  if (auto s = CheckKey(context); !s.ok()) return s;
  // A key may abort only its own requests (an admin key any): another's is "not found", as if absent.
  const Caller caller = CallerOf(context);
  const std::optional<std::string> owner = generation_->OwnerOf(in->request_id());
  if (!caller.admin && (!owner || *owner != caller.tenant)) {
    out->set_found(false);
    return grpc::Status::OK;
  }
  out->set_found(engine_->Abort(in->request_id()));
  return grpc::Status::OK;
}

grpc::Status InferenceService::SubscribeKvEvents(grpc::ServerContext* context, const v1::SubscribeKvEventsRequest* in,
                                                 grpc::ServerWriter<v1::KvEvent>* writer) {
  const EngineGate::Use use = state_->engine_gate.Enter();
  if (!use) return ShuttingDown();
  if (auto s = CheckKey(context); !s.ok()) return s;
  // A key sees only the events of its own requests (an admin key all, pages the prefix cache holds alone too).
  const Caller caller = CallerOf(context);
  // from_sequence 0: only new events; otherwise replay from that number (or from the oldest still held).
  uint64_t after = in->from_sequence() == 0 ? engine_->LastKvEvent() : in->from_sequence() - 1;
  while (!context->IsCancelled()) {
    uint64_t first = 0;
    const std::vector<engine::KvEventRecord> events = engine_->KvEventsSince(after, 256, 200, &first);
    for (const engine::KvEventRecord& e : events) {
      if (!caller.admin) {
        const std::optional<std::string> owner =
            e.request_id.empty() ? std::nullopt : generation_->OwnerOf(e.request_id);
        if (!owner || *owner != caller.tenant) {
          after = e.seq;
          continue;
        }
      }
      v1::KvEvent msg;
      msg.set_sequence_number(e.seq);
      switch (e.kind) {
        case engine::KvEventKind::kStored: msg.set_kind(v1::KV_EVENT_KIND_STORED); break;
        case engine::KvEventKind::kMoved: msg.set_kind(v1::KV_EVENT_KIND_MOVED); break;
        case engine::KvEventKind::kEvicted: msg.set_kind(v1::KV_EVENT_KIND_EVICTED); break;
      }
      msg.set_page_id(e.page);
      msg.set_request_id(e.request_id);
      msg.set_layer(e.layer);
      msg.set_kv_head(e.kv_head);
      msg.set_tier(std::string(engine::KvTierName(e.tier)));
      if (e.kind == engine::KvEventKind::kMoved) msg.set_from_tier(std::string(engine::KvTierName(e.from)));
      msg.set_format(e.format);
      msg.set_bytes(e.bytes);
      msg.set_unix_seconds(e.unix_seconds);
      if (!writer->Write(msg)) return grpc::Status::OK;  // the client went away
      after = e.seq;
    }
  }
  return grpc::Status::OK;
}

}  // namespace tq::server
