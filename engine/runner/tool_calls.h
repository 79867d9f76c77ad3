// Function calling in each chat format: how the tools are described to the model (chat_template.cc renders them
// with the helpers here), the syntax of a call in the model's output, the constraint that enforces it (an xgrammar
// structural tag), and the parser that takes calls back out of the text. One syntax per format:
//   chatml  (Hermes/Qwen): <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>, calls separated by "\n"
//   llama3  (JSON):        {"name": "f", "parameters": {...}}, calls separated by "\n"
//   mistral:               [TOOL_CALLS] [{"name": "f", "arguments": {...}}, ...]
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/runner/chat_template.h"

namespace tq::engine {

enum class ToolChoiceMode {
  kAuto,      // the model decides; calls it starts are constrained to a known function and its schema
  kNone,      // no calls (the tools are not shown to the model)
  kRequired,  // at least one call, nothing else
  kNamed,     // exactly one call of ToolChoice::name
};

struct ToolChoice {
  ToolChoiceMode mode = ToolChoiceMode::kAuto;
  std::string name;  // kNamed
};

// invalid_argument naming the problem: no tools, a tool without a name or with a name outside [A-Za-z0-9_.-]
// (at most 64), two tools of one name, parameters that are not a JSON-schema object or use an unsupported keyword
// (engine/grammar/schema_check.h), a named choice that is not among the tools. `max_depth` bounds the schemas.
Status CheckTools(const std::vector<ToolSpec>& tools, const ToolChoice& choice, int max_depth);

// The xgrammar structural tag (JSON text) that constrains the output for `choice`; "" for kNone. `parallel`:
// more than one call may follow (kRequired, kAuto). The tools must have passed CheckTools.
std::string ToolCallStructuralTag(ChatFormat format, const std::vector<ToolSpec>& tools, const ToolChoice& choice,
                                  bool parallel);

// One call as the format writes it in an assistant turn (the history the client sends back).
std::string RenderToolCalls(ChatFormat format, const std::vector<ToolCall>& calls);

// The tools as the format describes them to the model: a preamble (chatml, llama3) or the [AVAILABLE_TOOLS] body
// (mistral).
std::string DescribeTools(ChatFormat format, const std::vector<ToolSpec>& tools);

struct ParsedToolCalls {
  std::string content;          // the text outside the calls, trimmed
  std::vector<ToolCall> calls;  // in order; ids are left empty (the front end names them)
};

// The calls in `text`, for functions among `tools` whose arguments parse as a JSON object; anything else stays
// content.
ParsedToolCalls ParseToolCalls(ChatFormat format, std::string_view text, const std::vector<ToolSpec>& tools);

// The marker texts of the call syntaxes ("<tool_call>", "</tool_call>", "[TOOL_CALLS]"). Some vocabularies hold
// them as control tokens (Mistral's [TOOL_CALLS]); the engine lets the constraint produce those and prints them.
std::vector<std::string> ToolMarkerTexts();

// Where a call starts or may start in `text`: the first trigger ("<tool_call>", "{\"name\"", "[TOOL_CALLS]"), or a
// tail of the text that a trigger begins with. Text before it can be streamed as content; text.size() if none.
size_t ToolCallHoldback(ChatFormat format, std::string_view text);

}  // namespace tq::engine
