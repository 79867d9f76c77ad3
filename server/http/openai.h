// The OpenAI-compatible request and response bodies: JSON <-> engine requests and events.
// Parsing checks every field's type and range and reports the first problem with the field's name.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/utf8.h"
#include "engine/api.h"
#include "server/request_limits.h"
#include "server/http/openai_tools.h"
#include "server/request_options.h"

namespace tq::server {

struct ApiContext {
  std::string model_id;  // what /v1/models lists and `model` must name
  const engine::EngineApi* engine = nullptr;
  int ctx_size = 0;    // tokens per sequence
  int vocab_size = 0;
  RequestLimits limits;
  bool ignore_unknown_fields = false;  // config server.ignore_unknown_fields
};

// A parsed /v1/completions or /v1/chat/completions request. A field error is invalid_argument with `param` set.
struct CompletionJob {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  int n = 1;
  bool logprobs = false;
  int top_logprobs = 0;
  engine::GenerateRequest request;  // prompt tokens and parameters; ids are set per choice
  ToolJob tools;                    // chat: function calling (tools.active(): the output may hold calls)
};

struct ParseError {
  Status status;
  std::string param;  // the offending field, e.g. "temperature"
};

// Returns the job or fills `error`.
std::optional<CompletionJob> ParseCompletionRequest(const nlohmann::ordered_json& body, bool chat, const ApiContext& ctx,
                                                    ParseError* error);

// Response bodies. `texts[i]`, `finals[i]`, `tokens[i]` belong to choice i.
nlohmann::ordered_json CompletionResponse(const CompletionJob& job, const std::string& id, int64_t created,
                                  const std::string& model, const std::vector<std::string>& texts,
                                  const std::vector<engine::GenerateEvent>& finals,
                                  const std::vector<std::vector<engine::GeneratedToken>>& tokens,
                                  const engine::EngineApi& engine);

// One streamed chunk for choice `index`: text delta and/or a finish reason ("" = none).
nlohmann::ordered_json StreamChunk(const CompletionJob& job, const std::string& id, int64_t created,
                           const std::string& model, int index, const std::string& text,
                           const std::vector<engine::GeneratedToken>& tokens, const std::string& finish_reason,
                           bool first, const engine::EngineApi& engine);
// Streamed calls of choice `index` (delta.tool_calls, one entry per call, arguments whole; calls already named).
nlohmann::ordered_json ToolCallChunk(const CompletionJob& job, const std::string& id, int64_t created,
                                     const std::string& model, int index, std::vector<engine::ToolCall> calls);
nlohmann::ordered_json UsageChunk(const CompletionJob& job, const std::string& id, int64_t created, const std::string& model,
                          const engine::Usage& usage);
nlohmann::ordered_json UsageJson(const engine::Usage& usage);

// "stop", "length", ... as OpenAI clients expect.
std::string OpenAiFinishReason(engine::FinishReason reason);

}  // namespace tq::server
