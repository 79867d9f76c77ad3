// Function calling in the OpenAI chat API: `tools`, `tool_choice`, `parallel_tool_calls`, the assistant's
// `tool_calls` and `tool` messages in the history (parsing), and `message.tool_calls` / streamed
// `delta.tool_calls` in responses. The call syntax per chat format and its constraint are the engine's
// (engine/runner/tool_calls.h).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/api.h"
#include "server/request_options.h"

namespace tq::server {

struct ParseError;
struct ApiContext;

// Reads tools / tool_choice / parallel_tool_calls into `job` (the wire form only; ApplyTools checks and
// constrains). False with `error` filled on a problem.
bool ParseTools(const nlohmann::ordered_json& body, const ApiContext& ctx, ToolJob* job, ParseError* error);

// The assistant's tool_calls and a tool message's tool_call_id / name, into `m`. False with `error` filled.
bool ParseMessageToolFields(const nlohmann::ordered_json& message, engine::ChatMessage* m, ParseError* error);

// [{"id", "type": "function", "function": {"name", "arguments"}}] (arguments as JSON text, as OpenAI sends them).
nlohmann::ordered_json ToolCallsJson(const std::vector<engine::ToolCall>& calls);

}  // namespace tq::server
