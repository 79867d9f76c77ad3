// Function calling in the OpenAI chat API: `tools`, `tool_choice`, `parallel_tool_calls`, the assistant's
// `tool_calls` and `tool` messages in the history (parsing), and `message.tool_calls` / streamed
// `delta.tool_calls` in responses. The call syntax per chat format and its constraint are the engine's
// (engine/runner/tool_calls.h).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/api.h"

namespace tq::server {

struct ParseError;
struct ApiContext;

// A request's function-calling part. active() when the output may hold calls (tools given, choice not none).
struct ToolJob {
  std::vector<engine::ToolSpec> tools;
  engine::ToolChoice choice;
  bool parallel = true;
  engine::ChatFormat format = engine::ChatFormat::kChatMl;
  bool active() const { return !tools.empty() && choice.mode != engine::ToolChoiceMode::kNone; }
};

// Reads tools / tool_choice / parallel_tool_calls into `job` (checked: names, schemas, the named choice; a 400
// with `param` set otherwise). False with `error` filled on a problem.
bool ParseTools(const nlohmann::ordered_json& body, const ApiContext& ctx, ToolJob* job, ParseError* error);

// The assistant's tool_calls and a tool message's tool_call_id / name, into `m`. False with `error` filled.
bool ParseMessageToolFields(const nlohmann::ordered_json& message, engine::ChatMessage* m, ParseError* error);

// [{"id", "type": "function", "function": {"name", "arguments"}}] (arguments as JSON text, as OpenAI sends them).
nlohmann::ordered_json ToolCallsJson(const std::vector<engine::ToolCall>& calls);

// Names the calls: "call_" and 24 hex digits.
void NameToolCalls(std::vector<engine::ToolCall>* calls);

}  // namespace tq::server
