#include "server/request_options.h"

#include <cmath>

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

}  // namespace tq::server
