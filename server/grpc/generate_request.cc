#include "server/grpc/generate_request.h"

#include <utility>
#include <vector>

#include "common/utf8.h"

namespace tq::server {
namespace {

namespace v1 = tqserve::v1;

// Empty (the server picks one) or 1-128 characters of [A-Za-z0-9._:-].
bool IsSafeRequestId(std::string_view id) {
  if (id.size() > 128) return false;
  for (char c : id) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Status DecodeInput(const v1::GenerateRequest& in, int vocab_size, const engine::EngineApi& engine,
                   GrpcGenerateJob* job) {
  engine::GenerateRequest& r = job->request;
  switch (in.input_case()) {
    case v1::GenerateRequest::kPrompt:
      if (!IsValidUtf8(in.prompt())) return InvalidArgumentError("prompt is not valid UTF-8");
      r.prompt = engine.Tokenize(in.prompt(), {.add_special = true, .parse_special = false});
      return Status::Ok();
    case v1::GenerateRequest::kPromptTokens:
      r.prompt.assign(in.prompt_tokens().ids().begin(), in.prompt_tokens().ids().end());
      for (int32_t id : r.prompt) {
        if (id < 0 || id >= vocab_size) {
          return InvalidArgumentError("prompt token id " + std::to_string(id) + " is outside the vocabulary");
        }
      }
      return Status::Ok();
    case v1::GenerateRequest::kMessages: {
      std::vector<engine::ChatMessage> messages;
      for (const auto& m : in.messages().messages()) {
        engine::ChatMessage message{m.role(), m.content()};
        for (const auto& c : m.tool_calls()) message.tool_calls.push_back({c.id(), c.name(), c.arguments()});
        message.tool_call_id = m.tool_call_id();
        message.name = m.name();
        messages.push_back(std::move(message));
      }
      ToolJob& tools = job->tools;
      for (const auto& t : in.tools()) tools.tools.push_back({t.name(), t.description(), t.parameters()});
      static_assert(static_cast<int>(engine::ToolChoiceMode::kNamed) == v1::ToolChoice::MODE_NAMED &&
                    static_cast<int>(engine::ToolChoiceMode::kNone) == v1::ToolChoice::MODE_NONE);
      tools.choice = {static_cast<engine::ToolChoiceMode>(in.tool_choice().mode()), in.tool_choice().name()};
      if (in.has_parallel_tool_calls()) tools.parallel = in.parallel_tool_calls();
      TQ_ASSIGN_OR_RETURN(r.prompt,
                          engine.ChatPrompt(messages, tools.active() ? tools.tools : std::vector<engine::ToolSpec>{}));
      return Status::Ok();
    }
    case v1::GenerateRequest::INPUT_NOT_SET: break;
  }
  return InvalidArgumentError("one of prompt, prompt_tokens or messages is required");
}

Status DecodeSampling(const v1::SamplingParams& sp, int vocab_size, const RequestLimits& limits,
                      const engine::EngineApi& engine, engine::GenerateRequest* r) {
  if (sp.has_temperature()) r->sampling.temperature = sp.temperature();
  if (sp.has_top_p()) r->sampling.top_p = sp.top_p();
  if (sp.has_top_k()) r->sampling.top_k = sp.top_k();
  if (sp.has_min_p()) r->sampling.min_p = sp.min_p();
  if (sp.has_repetition_penalty()) r->sampling.repetition_penalty = sp.repetition_penalty();
  if (sp.has_frequency_penalty()) r->sampling.frequency_penalty = sp.frequency_penalty();
  if (sp.has_presence_penalty()) r->sampling.presence_penalty = sp.presence_penalty();
  if (sp.has_seed()) {
    r->sampling.seed = sp.seed();
    r->sampling.has_seed = true;
  }
  r->max_tokens = sp.has_max_tokens() ? sp.max_tokens() : limits.default_max_tokens;
  r->stop.assign(sp.stop().begin(), sp.stop().end());
  r->stop_tokens.assign(sp.stop_token_ids().begin(), sp.stop_token_ids().end());
  r->ignore_eos = sp.ignore_eos();
  r->logprobs = sp.logprobs();
  r->top_logprobs = sp.top_logprobs();
  if (!sp.logit_bias().empty()) {
    std::vector<std::pair<int64_t, double>> bias(sp.logit_bias().begin(), sp.logit_bias().end());
    TQ_RETURN_IF_ERROR(ApplyLogitBias(bias, limits, vocab_size, r));
  }
  if (sp.has_response_format()) {
    static constexpr const char* kTypes[] = {"text", "json_object", "json_schema", "regex", "grammar"};
    const auto& rf = sp.response_format();
    if (rf.type() < 0 || rf.type() > v1::ResponseFormat::TYPE_GRAMMAR) {
      return InvalidArgumentError("response_format.type is not a known type");
    }
    ResponseFormat format{.type = kTypes[rf.type()], .source = rf.source(), .strict = rf.strict()};
    TQ_RETURN_IF_ERROR(ApplyResponseFormat(format, limits, engine, r));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<GrpcGenerateJob> DecodeGenerateRequest(const v1::GenerateRequest& in, const Caller& caller,
                                                const std::string& model_id, int vocab_size,
                                                const RequestLimits& limits, const engine::EngineApi& engine,
                                                std::string new_id) {
  std::string lora;
  if (!in.model().empty()) {
    TQ_ASSIGN_OR_RETURN(lora, AdapterOfModel(in.model(), model_id, engine));
  }
  if (!in.lora().empty()) {
    if (!in.model().empty() && lora != in.lora()) {
      return InvalidArgumentError("model '" + in.model() + "' and lora '" + in.lora() + "' name different adapters");
    }
    TQ_ASSIGN_OR_RETURN(lora, AdapterOfModel(in.lora(), model_id, engine));
  }
  // A client's id goes into logs and events: a short token of safe characters only.
  if (!IsSafeRequestId(in.request_id())) {
    return InvalidArgumentError("request_id must be 1 to 128 characters of A-Z a-z 0-9 . _ : -");
  }
  GrpcGenerateJob job;
  engine::GenerateRequest& r = job.request;
  r.id = in.request_id().empty() ? std::move(new_id) : in.request_id();
  r.lora = std::move(lora);
  if (in.input_case() != v1::GenerateRequest::kMessages && (in.tools_size() > 0 || in.has_tool_choice())) {
    return InvalidArgumentError("tools need messages (a chat)");
  }
  if (in.tool_choice().mode() < v1::ToolChoice::MODE_AUTO || in.tool_choice().mode() > v1::ToolChoice::MODE_NAMED) {
    return InvalidArgumentError("tool_choice.mode is not a known mode");
  }
  TQ_RETURN_IF_ERROR(DecodeInput(in, vocab_size, engine, &job));
  TQ_RETURN_IF_ERROR(DecodeSampling(in.sampling(), vocab_size, limits, engine, &r));
  // Priority reorders the waiting queue for everyone: raising it is the operator's (an admin key, or no keys at
  // all); any key may lower its own.
  if (in.priority() > 0 && !caller.admin) {
    return PermissionDeniedError(
        "priority above 0 needs an admin key (server.admin_api_keys); other keys may only lower it");
  }
  r.priority = in.priority();
  TQ_RETURN_IF_ERROR(ApplyTools(&job.tools, limits, engine, &r));
  TQ_RETURN_IF_ERROR(ApplyCacheSalt(in.cache_salt(), &r));
  r.cache_salt = TenantCacheSalt(caller.tenant, r.cache_salt);
  return job;
}

}  // namespace tq::server
