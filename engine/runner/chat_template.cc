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

StatusOr<std::string> RenderChat(const ChatTemplate& tmpl, const std::vector<ChatMessage>& in) {
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
  std::string out;
  switch (tmpl.format) {
    case ChatFormat::kChatMl:
      for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      out += "<|im_start|>assistant\n";
      return out;
    case ChatFormat::kLlama3:
      for (const ChatMessage& m : messages) {
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
      }
      out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      return out;
    case ChatFormat::kMistral: {
      // A system message is prepended to the first user turn.
      std::string system;
      for (const ChatMessage& m : messages) {
        if (m.role == "system") {
          system += m.content + "\n\n";
        } else if (m.role == "user") {
          out += "[INST] " + system + m.content + " [/INST]";
          system.clear();
        } else {
          out += " " + m.content + "</s>";
        }
      }
      return out;
    }
  }
  return InternalError("unhandled chat format");
}

}  // namespace tq::engine
