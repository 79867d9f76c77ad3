#include "engine/runner/chat_template.h"

#include "engine/runner/tool_calls.h"

namespace tq::engine {

std::string_view ChatFormatName(ChatFormat format) {
  switch (format) {
    case ChatFormat::kChatMl: return "chatml";
    case ChatFormat::kLlama3: return "llama3";
    case ChatFormat::kMistral: return "mistral";
  }
  return "unknown";
}

StatusOr<ChatFormat> ParseChatFormat(std::string_view name) {
  for (ChatFormat f : {ChatFormat::kChatMl, ChatFormat::kLlama3, ChatFormat::kMistral}) {
    if (ChatFormatName(f) == name) return f;
  }
  return InvalidArgumentError("unknown chat format '" + std::string(name) + "' (known: chatml, llama3, mistral)");
}

StatusOr<ChatTemplate> DetectChatTemplate(std::string_view t) {
  if (t.find("<|im_start|>") != std::string_view::npos) {
    ChatTemplate tmpl{ChatFormat::kChatMl, ""};
    constexpr std::string_view kOpen = "'<|im_start|>system\n";
    const size_t at = t.find(kOpen);
    if (at != std::string_view::npos && t.find("!= 'system'") != std::string_view::npos) {
      const size_t from = at + kOpen.size();
      const size_t end = t.find("<|im_end|>", from);
      if (end != std::string_view::npos) tmpl.default_system = std::string(t.substr(from, end - from));
    }
    return tmpl;
  }
  if (t.find("<|start_header_id|>") != std::string_view::npos) return ChatTemplate{ChatFormat::kLlama3, ""};
  if (t.find("[INST]") != std::string_view::npos) return ChatTemplate{ChatFormat::kMistral, ""};
  if (t.empty()) return InvalidArgumentError("the model has no chat template; configure one (chatml, llama3, mistral)");
  return InvalidArgumentError(
      "the model's chat template is not one tqserve recognises (chatml, llama3, mistral); configure one");
}

namespace {

// Appends to a segment list, joining neighbours of the same kind.
class Segments {
 public:
  Segments& Marker(std::string_view text) { return Add(text, true); }
  Segments& Text(std::string_view text) { return Add(text, false); }
  std::vector<ChatSegment> Take() { return std::move(out_); }

 private:
  Segments& Add(std::string_view text, bool marker) {
    if (text.empty()) return *this;
    if (!out_.empty() && out_.back().marker == marker) {
      out_.back().text += text;
    } else {
      out_.push_back({std::string(text), marker});
    }
    return *this;
  }
  std::vector<ChatSegment> out_;
};

}  // namespace

StatusOr<std::vector<ChatSegment>> RenderChatSegments(const ChatTemplate& tmpl, const std::vector<ChatMessage>& in,
                                                      const std::vector<ToolSpec>& tools) {
  if (in.empty()) return InvalidArgumentError("messages must not be empty");
  std::vector<ChatMessage> messages;
  if (!tmpl.default_system.empty() && in.front().role != "system") {
    messages.push_back({"system", tmpl.default_system});
  }
  messages.insert(messages.end(), in.begin(), in.end());
  for (const ChatMessage& m : messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool") {
      return InvalidArgumentError("unknown message role '" + m.role + "' (allowed: system, user, assistant, tool)");
    }
  }
  const std::string described = tools.empty() ? "" : DescribeTools(tmpl.format, tools);
  // Roles are fixed words; they count as the template's text. Tool descriptions and calls are the client's text.
  Segments out;
  switch (tmpl.format) {
    case ChatFormat::kChatMl: {
      // The tools go at the end of the system turn (one is opened for them when the conversation has none).
      if (!described.empty() && messages.front().role != "system") messages.insert(messages.begin(), ChatMessage{"system", ""});
      for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "tool") {
          // Consecutive tool results share one user turn.
          const bool first = i == 0 || messages[i - 1].role != "tool";
          const bool last = i + 1 == messages.size() || messages[i + 1].role != "tool";
          out.Marker(first ? "<|im_start|>user\n" : "\n").Marker("<tool_response>\n").Text(m.content);
          out.Marker("\n</tool_response>");
          if (last) out.Marker("<|im_end|>\n");
          continue;
        }
        out.Marker("<|im_start|>" + m.role + "\n").Text(m.content);
        if (m.role == "system" && i == 0 && !described.empty()) {
          out.Text(m.content.empty() ? described : "\n\n" + described);
        }
        if (!m.tool_calls.empty()) {
          out.Text((m.content.empty() ? "" : "\n") + RenderToolCalls(tmpl.format, m.tool_calls));
        }
        out.Marker("<|im_end|>\n");
      }
      out.Marker("<|im_start|>assistant\n");
      return out.Take();
    }
    case ChatFormat::kLlama3: {
      bool told = described.empty();
      for (const ChatMessage& m : messages) {
        const std::string role = m.role == "tool" ? "ipython" : m.role;
        out.Marker("<|start_header_id|>" + role + "<|end_header_id|>\n\n");
        if (m.role == "user" && !told) {  // the tools go before the first user message
          out.Text(described);
          told = true;
        }
        out.Text(m.content);
        if (!m.tool_calls.empty()) {
          out.Text((m.content.empty() ? "" : "\n") + RenderToolCalls(tmpl.format, m.tool_calls));
        }
        out.Marker("<|eot_id|>");
      }
      out.Marker("<|start_header_id|>assistant<|end_header_id|>\n\n");
      return out.Take();
    }
    case ChatFormat::kMistral: {
      // A system message is prepended to the next user turn; the tools go before the last user turn.
      size_t last_user = messages.size();
      for (size_t i = 0; i < messages.size(); ++i) {
        if (messages[i].role == "user") last_user = i;
      }
      std::vector<std::string> system;
      for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "system") {
          system.push_back(m.content);
        } else if (m.role == "user") {
          if (i == last_user && !described.empty()) {
            out.Marker("[AVAILABLE_TOOLS] ").Text(described).Marker("[/AVAILABLE_TOOLS]");
          }
          out.Marker("[INST] ");
          for (const std::string& sys : system) out.Text(sys).Marker("\n\n");
          out.Text(m.content).Marker(" [/INST]");
          system.clear();
        } else if (m.role == "tool") {
          out.Marker("[TOOL_RESULTS] ").Text(m.content).Marker("[/TOOL_RESULTS]");
        } else {
          out.Marker(" ").Text(m.content);
          if (!m.tool_calls.empty()) out.Text(RenderToolCalls(tmpl.format, m.tool_calls));
          out.Marker("</s>");
        }
      }
      return out.Take();
    }
  }
  return InternalError("unhandled chat format");
}

StatusOr<std::string> RenderChat(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages,
                                 const std::vector<ToolSpec>& tools) {
  TQ_ASSIGN_OR_RETURN(const std::vector<ChatSegment> segments, RenderChatSegments(tmpl, messages, tools));
  std::string out;
  for (const ChatSegment& s : segments) out += s.text;
  return out;
}

}  // namespace tq::engine
