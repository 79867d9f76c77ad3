// Chat templates: the prompt text for a list of messages, in the format the model was tuned on. The format is
// recognised from the GGUF's tokenizer.chat_template string (a Jinja template; tqserve does not run Jinja, it
// recognises the known formats by their markers) or named in the configuration.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tq::engine {

enum class ChatFormat { kChatMl, kLlama3, kMistral };

// A function call the assistant made: its id (the client's, echoed back by the `tool` message that answers it),
// the function's name and its arguments as JSON text.
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

// A function the model may call: name, description and its parameters as JSON-schema text ("" = no parameters).
struct ToolSpec {
  std::string name;
  std::string description;
  std::string parameters;
};

struct ChatMessage {
  std::string role;  // system | user | assistant | tool
  std::string content;
  std::vector<ToolCall> tool_calls;  // assistant: the calls it made (rendered after its content)
  std::string tool_call_id;          // tool: the call this message answers
  std::string name;                  // tool: the function's name, when the client says
};

// "chatml", "llama3", "mistral".
std::string_view ChatFormatName(ChatFormat format);
StatusOr<ChatFormat> ParseChatFormat(std::string_view name);

struct ChatTemplate {
  ChatFormat format = ChatFormat::kChatMl;
  std::string default_system;  // inserted when the conversation has no system message (ChatML templates may say)
};

// The format whose markers the template uses, and a default system message when the template inserts one
// (`{% if ... != 'system' %}{{ '<|im_start|>system\n...<|im_end|>' }}`). invalid_argument naming the supported
// formats when none matches.
StatusOr<ChatTemplate> DetectChatTemplate(std::string_view jinja_template);

// One piece of a rendered prompt: the template's own text (markers such as "<|im_start|>", whose control-token
// text is tokenized as control tokens) or a message's role or content (tokenized as plain text).
struct ChatSegment {
  std::string text;
  bool marker = false;
};

// The prompt for `messages`, ending with the opening of the assistant's turn, as segments in order. BOS is not
// included (the tokenizer adds it as the model's metadata says). `tools` are described to the model in the
// format's own way (ChatML: Hermes-style <tools> in the system turn; Llama 3: JSON in the first user turn;
// Mistral: [AVAILABLE_TOOLS] before the last user turn); engine/runner/tool_calls.h has the matching call
// syntax. Errors: no messages, an unknown role.
StatusOr<std::vector<ChatSegment>> RenderChatSegments(const ChatTemplate& tmpl,
                                                      const std::vector<ChatMessage>& messages,
                                                      const std::vector<ToolSpec>& tools = {});

// The same prompt as one string (the segments joined).
StatusOr<std::string> RenderChat(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages,
                                 const std::vector<ToolSpec>& tools = {});

}  // namespace tq::engine
