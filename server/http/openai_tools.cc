#include "server/http/openai_tools.h"

#include "server/http/openai.h"

namespace tq::server {
namespace {

using json = nlohmann::ordered_json;

bool Fail(ParseError* error, const std::string& param, Status status) {
  error->status = std::move(status);
  error->param = param;
  return false;
}

bool Fail(ParseError* error, const std::string& param, const std::string& message) {
  return Fail(error, param, InvalidArgumentError(message));
}

}  // namespace

bool ParseTools(const json& body, const ApiContext& ctx, ToolJob* job, ParseError* error) {
  auto it = body.find("tools");
  const bool has_tools = it != body.end() && !it->is_null() && !(it->is_array() && it->empty());
  if (has_tools) {
    if (!it->is_array()) return Fail(error, "tools", "'tools' must be a list of {type: function, function} objects");
    for (const json& t : *it) {
      if (!t.is_object() || t.value("type", json()) != "function" || !t.contains("function") ||
          !t["function"].is_object()) {
        return Fail(error, "tools", "each tool must be {\"type\": \"function\", \"function\": {...}}");
      }
      const json& fn = t["function"];
      for (const auto& [key, value] : fn.items()) {
        if (key != "name" && key != "description" && key != "parameters" && key != "strict") {
          return Fail(error, "tools", "unknown field 'function." + key + "' in a tool");
        }
      }
      engine::ToolSpec spec;
      if (!fn.contains("name") || !fn["name"].is_string()) {
        return Fail(error, "tools", "each tool's function needs a string 'name'");
      }
      spec.name = fn["name"].get<std::string>();
      if (fn.contains("description") && !fn["description"].is_null()) {
        if (!fn["description"].is_string()) return Fail(error, "tools", "a tool's 'description' must be a string");
        spec.description = fn["description"].get<std::string>();
      }
      if (fn.contains("strict") && !fn["strict"].is_null() && !fn["strict"].is_boolean()) {
        return Fail(error, "tools", "a tool's 'strict' must be a boolean");
      }
      if (fn.contains("parameters") && !fn["parameters"].is_null()) {
        if (!fn["parameters"].is_object()) return Fail(error, "tools", "a tool's 'parameters' must be a JSON schema");
        spec.parameters = fn["parameters"].dump();
        if (static_cast<int64_t>(spec.parameters.size()) > ctx.limits.max_schema_bytes) {
          return Fail(error, "tools", "the parameters of '" + spec.name + "' are over " +
                                          std::to_string(ctx.limits.max_schema_bytes) + " bytes");
        }
      }
      job->tools.push_back(std::move(spec));
    }
  }
  auto choice = body.find("tool_choice");
  if (choice != body.end() && !choice->is_null()) {
    if (choice->is_string()) {
      const std::string c = choice->get<std::string>();
      if (c == "auto") {
        job->choice.mode = engine::ToolChoiceMode::kAuto;
      } else if (c == "none") {
        job->choice.mode = engine::ToolChoiceMode::kNone;
      } else if (c == "required") {
        job->choice.mode = engine::ToolChoiceMode::kRequired;
      } else {
        return Fail(error, "tool_choice", "'tool_choice' must be auto, none, required or a named function");
      }
    } else if (choice->is_object() && choice->value("type", json()) == "function" && choice->contains("function") &&
               (*choice)["function"].is_object() && (*choice)["function"].contains("name") &&
               (*choice)["function"]["name"].is_string()) {
      job->choice.mode = engine::ToolChoiceMode::kNamed;
      job->choice.name = (*choice)["function"]["name"].get<std::string>();
    } else {
      return Fail(error, "tool_choice",
                  "'tool_choice' must be auto, none, required or {\"type\": \"function\", \"function\": {\"name\"}}");
    }
    if (!has_tools && job->choice.mode != engine::ToolChoiceMode::kNone) {
      return Fail(error, "tool_choice", "'tool_choice' needs 'tools'");
    }
  }
  auto parallel = body.find("parallel_tool_calls");
  if (parallel != body.end() && !parallel->is_null()) {
    if (!parallel->is_boolean()) return Fail(error, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    job->parallel = parallel->get<bool>();
  }
  return true;
}

bool ParseMessageToolFields(const json& m, engine::ChatMessage* out, ParseError* error) {
  if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
    const json& calls = m["tool_calls"];
    if (out->role != "assistant" || !calls.is_array()) {
      return Fail(error, "messages", "'tool_calls' is a list, on assistant messages only");
    }
    for (const json& c : calls) {
      if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
          !c["function"].contains("name") || !c["function"]["name"].is_string()) {
        return Fail(error, "messages", "each tool call needs a function with a string 'name'");
      }
      engine::ToolCall call;
      call.name = c["function"]["name"].get<std::string>();
      if (c.contains("id") && c["id"].is_string()) call.id = c["id"].get<std::string>();
      const json& args = c["function"].value("arguments", json("{}"));
      if (!args.is_string()) return Fail(error, "messages", "a tool call's 'arguments' must be a JSON string");
      call.arguments = args.get<std::string>();
      out->tool_calls.push_back(std::move(call));
    }
  }
  if (out->role == "tool") {
    if (!m.contains("tool_call_id") || !m["tool_call_id"].is_string()) {
      return Fail(error, "messages", "a tool message needs a string 'tool_call_id'");
    }
    out->tool_call_id = m["tool_call_id"].get<std::string>();
  }
  if (m.contains("name") && m["name"].is_string()) out->name = m["name"].get<std::string>();
  return true;
}

json ToolCallsJson(const std::vector<engine::ToolCall>& calls) {
  json out = json::array();
  for (const engine::ToolCall& c : calls) {
    out.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return out;
}

}  // namespace tq::server
