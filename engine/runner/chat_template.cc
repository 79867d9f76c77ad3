#include "engine/runner/chat_template.h"

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

StatusOr<std::vector<ChatSegment>> RenderChatSegments(const ChatTemplate& tmpl, const std::vector<ChatMessage>& in) {
  if (in.empty()) return InvalidArgumentError("messages must not be empty");
  std::vector<ChatMessage> messages;
  if (!tmpl.default_system.empty() && in.front().role != "system") {
    messages.push_back({"system", tmpl.default_system});
  }
  messages.insert(messages.end(), in.begin(), in.end());
  for (const ChatMessage& m : messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      return InvalidArgumentError("unknown message role '" + m.role + "' (allowed: system, user, assistant)");
    }
  }
  // Roles are one of three fixed words; they count as the template's text.
  Segments out;
  switch (tmpl.format) {
    case ChatFormat::kChatMl:
      for (const ChatMessage& m : messages) {
        out.Marker("<|im_start|>" + m.role + "\n").Text(m.content).Marker("<|im_end|>\n");
      }
      out.Marker("<|im_start|>assistant\n");
      return out.Take();
    case ChatFormat::kLlama3:
      for (const ChatMessage& m : messages) {
        out.Marker("<|start_header_id|>" + m.role + "<|end_header_id|>\n\n").Text(m.content).Marker("<|eot_id|>");
      }
      out.Marker("<|start_header_id|>assistant<|end_header_id|>\n\n");
      return out.Take();
    case ChatFormat::kMistral: {
      // A system message is prepended to the first user turn.
      std::vector<std::string> system;
      for (const ChatMessage& m : messages) {
        if (m.role == "system") {
          system.push_back(m.content);
        } else if (m.role == "user") {
          out.Marker("[INST] ");
          for (const std::string& s : system) out.Text(s).Marker("\n\n");
          out.Text(m.content).Marker(" [/INST]");
          system.clear();
        } else {
          out.Marker(" ").Text(m.content).Marker("</s>");
        }
      }
      return out.Take();
    }
  }
  return InternalError("unhandled chat format");
}

StatusOr<std::string> RenderChat(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages) {
  TQ_ASSIGN_OR_RETURN(const std::vector<ChatSegment> segments, RenderChatSegments(tmpl, messages));
  std::string out;
  for (const ChatSegment& s : segments) out += s.text;
  return out;
}

}  // namespace tq::engine
