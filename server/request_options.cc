#include "server/request_options.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "common/utf8.h"

namespace tq::server {

Status ApplyResponseFormat(const ResponseFormat& format, const RequestLimits& limits, const engine::EngineApi& engine,
                           engine::GenerateRequest* request) {
  engine::ConstraintSpec spec;
  if (format.type == "text") {
    request->constraint = nullptr;
    return Status::Ok();
  } else if (format.type == "json_object") {
    spec.kind = engine::ConstraintKind::kJsonObject;
  } else if (format.type == "json_schema") {
    spec.kind = engine::ConstraintKind::kJsonSchema;
  } else if (format.type == "regex") {
    spec.kind = engine::ConstraintKind::kRegex;
  } else if (format.type == "grammar") {
    spec.kind = engine::ConstraintKind::kEbnf;
  } else {
    return InvalidArgumentError("response_format type '" + format.type +
                                "' is not one of text, json_object, json_schema, regex, grammar");
  }
  if (static_cast<int64_t>(format.source.size()) > limits.max_schema_bytes) {
    return InvalidArgumentError("the " + format.type + " is " + std::to_string(format.source.size()) +
                                " bytes; at most " + std::to_string(limits.max_schema_bytes) + " are allowed");
  }
  spec.source = format.source;
  spec.strict = format.strict;
  spec.max_depth = limits.max_schema_depth;
  TQ_ASSIGN_OR_RETURN(request->constraint, engine.CompileConstraint(spec));
  return Status::Ok();
}

Status ApplyTools(ToolJob* tools, const RequestLimits& limits, const engine::EngineApi& engine,
                  engine::GenerateRequest* request) {
  if (tools->tools.empty()) {
    if (tools->choice.mode != engine::ToolChoiceMode::kAuto && tools->choice.mode != engine::ToolChoiceMode::kNone) {
      return InvalidArgumentError("tool_choice needs tools");
    }
    return Status::Ok();
  }
  TQ_RETURN_IF_ERROR(engine::CheckTools(tools->tools, tools->choice, limits.max_schema_depth));
  auto format = engine::ParseChatFormat(engine.Info().chat_format);
  if (!format.ok()) return FailedPreconditionError("this model has no chat format to call tools in");
  tools->format = *format;
  if (!tools->active()) return Status::Ok();
  if (request->constraint) {
    return InvalidArgumentError("response_format cannot be combined with tools unless tool_choice is none");
  }
  TQ_ASSIGN_OR_RETURN(request->constraint,
                      engine.CompileConstraint({.kind = engine::ConstraintKind::kStructuralTag,
                                                .source = engine::ToolCallStructuralTag(
                                                    tools->format, tools->tools, tools->choice, tools->parallel)}));
  return Status::Ok();
}

std::string ToolCallFilter::Push(const std::string& text) {
  full_ += text;
  const size_t hold = std::max(emitted_, engine::ToolCallHoldback(job_.format, full_));
  std::string out = full_.substr(emitted_, hold - emitted_);
  emitted_ = hold;
  return out;
}

ToolCallFilter::End ToolCallFilter::Finish() {
  End end;
  engine::ParsedToolCalls parsed = engine::ParseToolCalls(job_.format, full_, job_.tools);
  if (parsed.calls.empty()) {
    end.content = full_.substr(emitted_);
    emitted_ = full_.size();
    return end;
  }
  // Content outside the calls that was not sent yet (text between or after calls): the parsed content less the
  // part already sent (which the parse trimmed at the front).
  const std::string sent = full_.substr(0, emitted_);
  const size_t lead = sent.find_first_not_of(" \t\r\n");
  const std::string sent_trimmed = lead == std::string::npos ? "" : sent.substr(lead);
  if (parsed.content.rfind(sent_trimmed, 0) == 0) end.content = parsed.content.substr(sent_trimmed.size());
  NameToolCalls(&parsed.calls);
  end.calls = std::move(parsed.calls);
  emitted_ = full_.size();
  return end;
}

void NameToolCalls(std::vector<engine::ToolCall>* calls) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  for (engine::ToolCall& c : *calls) {
    char buf[25];
    std::snprintf(buf, sizeof buf, "%016llx%08x", static_cast<unsigned long long>(rng()),
                  static_cast<unsigned>(rng() & 0xffffffffu));
    c.id = std::string("call_") + buf;
  }
}

Status ApplyCacheSalt(const std::string& salt, engine::GenerateRequest* request) {
  if (salt.size() > 256) return InvalidArgumentError("cache_salt is longer than 256 bytes");
  if (!IsValidUtf8(salt)) return InvalidArgumentError("cache_salt is not valid UTF-8");
  request->cache_salt = salt;
  return Status::Ok();
}

std::string TenantCacheSalt(const std::string& tenant, const std::string& salt) {
  return tenant.empty() ? salt : "key:" + tenant + "/" + salt;
}

Status ApplyLogitBias(const std::vector<std::pair<int64_t, double>>& bias, const RequestLimits& limits,
                      int vocab_size, engine::GenerateRequest* request) {
  if (static_cast<int64_t>(bias.size()) > limits.max_logit_bias) {
    return InvalidArgumentError("logit_bias has " + std::to_string(bias.size()) + " entries; at most " +
                                std::to_string(limits.max_logit_bias) + " are allowed");
  }
  auto& out = request->sampling.logit_bias;
  out.clear();
  for (const auto& [token, value] : bias) {
    if (token < 0 || token >= vocab_size) {
      return InvalidArgumentError("logit_bias: token id " + std::to_string(token) + " is outside [0, " +
                                  std::to_string(vocab_size) + ")");
    }
    if (!(value >= -100 && value <= 100)) {
      return InvalidArgumentError("logit_bias: the bias of token " + std::to_string(token) +
                                  " must be in [-100, 100]");
    }
    out.emplace_back(static_cast<int32_t>(token), static_cast<float>(value));
  }
  return Status::Ok();
}

StatusOr<std::string> AdapterOfModel(const std::string& asked, const std::string& served,
                                     const engine::EngineApi& engine) {
  if (asked == served) return std::string();
  const std::vector<engine::LoraInfo> loras = engine.Loras();
  std::string name = asked;
  if (asked.size() > served.size() + 1 && asked.compare(0, served.size(), served) == 0 && asked[served.size()] == ':') {
    name = asked.substr(served.size() + 1);
  }
  std::string listed = "'" + served + "'";
  for (const engine::LoraInfo& l : loras) {
    if (l.name == name) return name;
    listed += ", '" + served + ":" + l.name + "'";
  }
  return NotFoundError("model '" + asked + "' is not served here (this server serves " + listed + ")");
}

}  // namespace tq::server
