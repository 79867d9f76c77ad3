#include "engine/runner/tool_calls.h"

#include <nlohmann/json.hpp>
#include <set>

#include "engine/grammar/schema_check.h"

namespace tq::engine {
namespace {

using Json = nlohmann::ordered_json;

std::string_view Trigger(ChatFormat format) {
  switch (format) {
    case ChatFormat::kChatMl: return "<tool_call>";
    case ChatFormat::kLlama3: return "{\"name\"";
    case ChatFormat::kMistral: return "[TOOL_CALLS]";
  }
  return "";
}

// The key the format's calls put the arguments under.
std::string_view ArgumentsKey(ChatFormat format) {
  return format == ChatFormat::kLlama3 ? "parameters" : "arguments";
}

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json Parameters(const ToolSpec& t) {
  if (t.parameters.empty()) return Json{{"type", "object"}, {"properties", Json::object()}};
  return Json::parse(t.parameters, nullptr, false);
}

// The text before a call's arguments: everything up to where the JSON object of arguments starts.
std::string CallBegin(ChatFormat format, const std::string& name) {
  const std::string head = "{\"name\": " + Dump(Json(name)) + ", \"" + std::string(ArgumentsKey(format)) + "\": ";
  return format == ChatFormat::kChatMl ? "<tool_call>\n" + head : head;
}

std::string_view CallEnd(ChatFormat format) { return format == ChatFormat::kChatMl ? "}\n</tool_call>" : "}"; }

std::string_view Separator(ChatFormat format) { return format == ChatFormat::kMistral ? ", " : "\n"; }

Json CallTag(ChatFormat format, const ToolSpec& t) {
  return Json{{"type", "tag"},
              {"begin", CallBegin(format, t.name)},
              {"content", {{"type", "json_schema"}, {"json_schema", Parameters(t)}}},
              {"end", std::string(CallEnd(format))}};
}

std::string_view Trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// One past the '}' that closes the object opening at text[open] (strings and escapes skipped); npos when the
// text ends first.
size_t JsonObjectEnd(std::string_view text, size_t open) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = open; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

bool ValidName(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  }
  return true;
}

// A call object {"name": ..., "arguments"/"parameters": {...}} naming one of `names`.
bool ToCall(const Json& j, const std::set<std::string>& names, ToolCall* out) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  const std::string name = j["name"].get<std::string>();
  if (!names.count(name)) return false;
  const Json* args = nullptr;
  for (const char* key : {"arguments", "parameters"}) {
    if (j.contains(key)) args = &j[key];
  }
  if (args == nullptr || !args->is_object()) return false;
  out->name = name;
  out->arguments = Dump(*args);
  return true;
}

}  // namespace

Status CheckTools(const std::vector<ToolSpec>& tools, const ToolChoice& choice, int max_depth) {
  if (tools.empty()) return InvalidArgumentError("tools must not be empty");
  std::set<std::string> names;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ToolSpec& t = tools[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!ValidName(t.name)) {
      return InvalidArgumentError(where + ": a function name is 1 to 64 characters of A-Z a-z 0-9 _ . -");
    }
    if (!names.insert(t.name).second) return InvalidArgumentError(where + ": two tools are named '" + t.name + "'");
    const Json p = Parameters(t);
    if (p.is_discarded() || !p.is_object()) {
      return InvalidArgumentError(where + " ('" + t.name + "'): parameters must be a JSON-schema object");
    }
    if (Status s = CheckJsonSchema(p, max_depth); !s.ok()) {
      return InvalidArgumentError(where + " ('" + t.name + "') parameters: " + s.message());
    }
  }
  if (choice.mode == ToolChoiceMode::kNamed && !names.count(choice.name)) {
    return InvalidArgumentError("tool_choice names '" + choice.name + "', which is not among the tools");
  }
  return Status::Ok();
}

std::string ToolCallStructuralTag(ChatFormat format, const std::vector<ToolSpec>& tools, const ToolChoice& choice,
                                  bool parallel) {
  if (choice.mode == ToolChoiceMode::kNone) return "";
  Json tags = Json::array();
  for (const ToolSpec& t : tools) {
    if (choice.mode != ToolChoiceMode::kNamed || t.name == choice.name) tags.push_back(CallTag(format, t));
  }
  const bool one = choice.mode == ToolChoiceMode::kNamed || !parallel;
  Json calls{{"type", "tags_with_separator"},
             {"tags", tags},
             {"separator", std::string(Separator(format))},
             {"at_least_one", true},
             {"stop_after_first", one}};
  Json f;
  if (format == ChatFormat::kMistral) {
    // [TOOL_CALLS] [call, call]: the list is one tag around the separated calls.
    Json list{{"type", "tag"}, {"begin", "[TOOL_CALLS] ["}, {"content", calls}, {"end", "]"}};
    f = choice.mode == ToolChoiceMode::kAuto
            ? Json{{"type", "triggered_tags"}, {"triggers", {"[TOOL_CALLS]"}}, {"tags", {list}},
                   {"stop_after_first", true}}
            : list;
  } else if (choice.mode == ToolChoiceMode::kAuto) {
    f = Json{{"type", "triggered_tags"},
             {"triggers", {std::string(Trigger(format))}},
             {"tags", tags},
             {"stop_after_first", !parallel}};
  } else {
    f = calls;
  }
  return Dump(Json{{"type", "structural_tag"}, {"format", f}});
}

std::string RenderToolCalls(ChatFormat format, const std::vector<ToolCall>& calls) {
  std::string out;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i > 0) out += Separator(format);
    Json args = Json::parse(calls[i].arguments, nullptr, false);
    if (args.is_discarded()) args = calls[i].arguments;  // the client's text as a string
    out += CallBegin(format, calls[i].name) + Dump(args) + std::string(CallEnd(format));
  }
  if (format == ChatFormat::kMistral) out = "[TOOL_CALLS] [" + out + "]";
  return out;
}

std::string DescribeTools(ChatFormat format, const std::vector<ToolSpec>& tools) {
  Json list = Json::array();
  std::string lines;
  for (const ToolSpec& t : tools) {
    Json fn{{"name", t.name}};
    if (!t.description.empty()) fn["description"] = t.description;
    fn["parameters"] = Parameters(t);
    Json tool{{"type", "function"}, {"function", fn}};
    lines += Dump(tool) + "\n";
    list.push_back(tool);
  }
  switch (format) {
    case ChatFormat::kChatMl:
      return "# Tools\n\nYou may call functions to help with the request. Their signatures, one JSON object per "
             "line, are inside <tools></tools>:\n<tools>\n" + lines +
             "</tools>\n\nTo call functions, reply with one <tool_call></tool_call> block per call, each holding a "
             "JSON object with the function's name and its arguments:\n<tool_call>\n"
             "{\"name\": \"function name\", \"arguments\": {\"argument name\": \"value\"}}\n</tool_call>";
    case ChatFormat::kLlama3:
      return "You may answer by calling one of the functions below. To call one, reply with only a JSON object "
             "{\"name\": \"function name\", \"parameters\": {\"argument name\": \"value\"}}.\n\n" + lines + "\n";
    case ChatFormat::kMistral:
      return Dump(list);
  }
  return "";
}

ParsedToolCalls ParseToolCalls(ChatFormat format, std::string_view text, const std::vector<ToolSpec>& tools) {
  std::set<std::string> names;
  for (const ToolSpec& t : tools) names.insert(t.name);
  ParsedToolCalls out;
  std::string content;
  switch (format) {
    case ChatFormat::kChatMl: {
      size_t at = 0;
      while (at < text.size()) {
        const size_t open = text.find("<tool_call>", at);
        const size_t close = open == std::string_view::npos ? open : text.find("</tool_call>", open);
        if (close == std::string_view::npos) {
          content += text.substr(at);
          break;
        }
        const std::string_view body = text.substr(open + 11, close - open - 11);
        ToolCall call;
        if (ToCall(Json::parse(Trim(body), nullptr, false), names, &call)) {
          content += text.substr(at, open - at);
          out.calls.push_back(std::move(call));
        } else {
          content += text.substr(at, close + 12 - at);
        }
        at = close + 12;
      }
      break;
    }
    case ChatFormat::kLlama3: {
      // Every JSON object in the text that is a call; the rest is content.
      size_t at = 0;
      while (at < text.size()) {
        const size_t open = text.find('{', at);
        const size_t end = open == std::string_view::npos ? open : JsonObjectEnd(text, open);
        if (end == std::string_view::npos) {
          content += text.substr(at);
          break;
        }
        ToolCall call;
        if (ToCall(Json::parse(text.substr(open, end - open), nullptr, false), names, &call)) {
          content += text.substr(at, open - at);
          out.calls.push_back(std::move(call));
        } else {
          content += text.substr(at, end - at);
        }
        at = end;
      }
      break;
    }
    case ChatFormat::kMistral: {
      // [TOOL_CALLS] then one JSON array of calls; text before and after it is content.
      const size_t open = text.find("[TOOL_CALLS]");
      const size_t list_at = open == std::string_view::npos ? open : text.find('[', open + 12);
      const size_t end = list_at == std::string_view::npos ? list_at : JsonObjectEnd(text, list_at);
      const Json list = end == std::string_view::npos ? Json() : Json::parse(text.substr(list_at, end - list_at),
                                                                             nullptr, false);
      std::vector<ToolCall> calls;
      bool all = list.is_array() && !list.empty() && Trim(text.substr(open + 12, list_at - open - 12)).empty();
      for (const Json& j : all ? list : Json::array()) {
        ToolCall call;
        if (!ToCall(j, names, &call)) {
          all = false;
          break;
        }
        calls.push_back(std::move(call));
      }
      if (all) {
        content = std::string(text.substr(0, open)) + std::string(text.substr(end));
        out.calls = std::move(calls);
      } else {
        content = std::string(text);
      }
      break;
    }
  }
  out.content = std::string(Trim(content));
  return out;
}

std::vector<std::string> ToolMarkerTexts() { return {"<tool_call>", "</tool_call>", "[TOOL_CALLS]"}; }

size_t ToolCallHoldback(ChatFormat format, std::string_view text) {
  const std::string_view trigger = Trigger(format);
  const size_t at = text.find(trigger);
  if (at != std::string_view::npos) return at;
  for (size_t n = std::min(trigger.size() - 1, text.size()); n > 0; --n) {
    if (text.substr(text.size() - n) == trigger.substr(0, n)) return text.size() - n;
  }
  return text.size();
}

}  // namespace tq::engine
