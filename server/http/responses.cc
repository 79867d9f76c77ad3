// POST /v1/responses (OpenAI's Responses API) over the same admission path as chat: input items become chat
// messages (with the stored conversation of previous_response_id in front), tools and text.format become the
// same constraints, and the output becomes message and function_call items; streamed as typed events
// (response.created, response.output_text.delta, response.function_call_arguments.delta, response.completed, ...).
// GET and DELETE /v1/responses/{id} read and drop stored responses.
#include <ctime>
#include <set>

#include "common/utf8.h"
#include "server/request_options.h"
#include "server/http/route_util.h"
#include "server/http/routes.h"

namespace tq::server {
namespace {

using json = nlohmann::ordered_json;

struct ResponsesJob {
  std::vector<engine::ChatMessage> history;  // the stored conversation of previous_response_id
  std::vector<engine::ChatMessage> input;    // this request's input items
  std::string instructions;
  ToolJob tools;
  engine::GenerateRequest request;
  bool stream = false;
  bool store = true;
  std::string previous_response_id;
  // Echoed in the response object.
  json tools_json = json::array();
  json tool_choice = "auto";
  json text = {{"format", {{"type", "text"}}}};
  json metadata = json::object();
  json max_output_tokens = nullptr;
  double temperature = 1.0, top_p = 1.0;
};

struct FieldError {
  Status status;
  std::string param;
};

std::optional<FieldError> Bad(const std::string& param, const std::string& message) {
  return FieldError{InvalidArgumentError(message), param};
}

const std::set<std::string, std::less<>> kFields = {
    "model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "tools", "tool_choice",
    "parallel_tool_calls", "text", "stream", "store", "previous_response_id", "metadata", "user", "cache_salt",
    "truncation", "include", "reasoning", "service_tier", "background", "top_logprobs"};

// Text of a message's content: a string or input_text / output_text parts.
std::optional<FieldError> ContentText(const json& content, std::string* out) {
  if (content.is_string()) {
    *out = content.get<std::string>();
  } else if (content.is_array()) {
    for (const json& part : content) {
      const json type = part.is_object() ? part.value("type", json()) : json();
      if ((type != "input_text" && type != "output_text" && type != "text") || !part.contains("text") ||
          !part["text"].is_string()) {
        return Bad("input", "only input_text and output_text content parts are supported");
      }
      *out += part["text"].get<std::string>();
    }
  } else {
    return Bad("input", "a message's content must be a string or a list of text parts");
  }
  if (!IsValidUtf8(*out)) return Bad("input", "message content is not valid UTF-8");
  return std::nullopt;
}

std::optional<FieldError> ParseInput(const json& in, std::vector<engine::ChatMessage>* out) {
  if (in.is_string()) {
    std::string text = in.get<std::string>();
    if (!IsValidUtf8(text)) return Bad("input", "'input' is not valid UTF-8");
    out->push_back({"user", std::move(text)});
    return std::nullopt;
  }
  if (!in.is_array() || in.empty()) return Bad("input", "'input' must be a string or a non-empty list of items");
  for (const json& item : in) {
    if (!item.is_object()) return Bad("input", "each input item must be an object");
    const std::string type = item.value("type", item.contains("role") ? "message" : "");
    if (type == "message") {
      if (!item.contains("role") || !item["role"].is_string()) return Bad("input", "a message item needs a 'role'");
      std::string role = item["role"].get<std::string>();
      if (role == "developer") role = "system";
      if (role != "system" && role != "user" && role != "assistant") {
        return Bad("input", "message role '" + role + "' is not one of user, assistant, system, developer");
      }
      engine::ChatMessage m{role, ""};
      if (auto e = ContentText(item.value("content", json("")), &m.content)) return e;
      out->push_back(std::move(m));
    } else if (type == "function_call") {
      for (const char* key : {"call_id", "name", "arguments"}) {
        if (!item.contains(key) || !item[key].is_string()) {
          return Bad("input", std::string("a function_call item needs a string '") + key + "'");
        }
      }
      engine::ToolCall call{item["call_id"].get<std::string>(), item["name"].get<std::string>(),
                            item["arguments"].get<std::string>()};
      // Calls right after an assistant message (or another call) belong to that turn.
      if (out->empty() || out->back().role != "assistant") out->push_back({"assistant", ""});
      out->back().tool_calls.push_back(std::move(call));
    } else if (type == "function_call_output") {
      if (!item.contains("call_id") || !item["call_id"].is_string() || !item.contains("output") ||
          !item["output"].is_string()) {
        return Bad("input", "a function_call_output item needs string 'call_id' and 'output'");
      }
      engine::ChatMessage m{"tool", item["output"].get<std::string>()};
      m.tool_call_id = item["call_id"].get<std::string>();
      out->push_back(std::move(m));
    } else {
      return Bad("input", "input item type '" + type + "' is not supported (message, function_call, "
                          "function_call_output)");
    }
  }
  return std::nullopt;
}

std::optional<FieldError> ParseTools(const json& body, ResponsesJob* job) {
  if (body.contains("tools") && !body["tools"].is_null()) {
    const json& tools = body["tools"];
    if (!tools.is_array()) return Bad("tools", "'tools' must be a list");
    for (const json& t : tools) {
      if (!t.is_object() || t.value("type", json()) != "function") {
        return Bad("tools", "only function tools are supported");
      }
      for (const auto& [key, value] : t.items()) {
        if (key != "type" && key != "name" && key != "description" && key != "parameters" && key != "strict") {
          return Bad("tools", "unknown field '" + key + "' in a function tool");
        }
      }
      if (t.contains("strict") && !t["strict"].is_null() && !t["strict"].is_boolean()) {
        return Bad("tools", "a tool's 'strict' must be a boolean");
      }
      engine::ToolSpec spec;
      if (!t.contains("name") || !t["name"].is_string()) return Bad("tools", "each function tool needs a 'name'");
      spec.name = t["name"].get<std::string>();
      if (t.contains("description") && t["description"].is_string()) spec.description = t["description"];
      if (t.contains("parameters") && !t["parameters"].is_null()) {
        if (!t["parameters"].is_object()) return Bad("tools", "a tool's 'parameters' must be a JSON schema");
        spec.parameters = t["parameters"].dump();
      }
      job->tools.tools.push_back(std::move(spec));
    }
    job->tools_json = tools;
  }
  if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
    const json& c = body["tool_choice"];
    engine::ToolChoice& choice = job->tools.choice;
    if (c == "auto") {
      choice.mode = engine::ToolChoiceMode::kAuto;
    } else if (c == "none") {
      choice.mode = engine::ToolChoiceMode::kNone;
    } else if (c == "required") {
      choice.mode = engine::ToolChoiceMode::kRequired;
    } else if (c.is_object() && c.value("type", json()) == "function" && c.contains("name") && c["name"].is_string()) {
      choice.mode = engine::ToolChoiceMode::kNamed;
      choice.name = c["name"].get<std::string>();
    } else {
      return Bad("tool_choice", "'tool_choice' must be auto, none, required or {\"type\": \"function\", \"name\"}");
    }
    job->tool_choice = c;
  }
  if (body.contains("parallel_tool_calls") && !body["parallel_tool_calls"].is_null()) {
    if (!body["parallel_tool_calls"].is_boolean()) return Bad("parallel_tool_calls", "must be a boolean");
    job->tools.parallel = body["parallel_tool_calls"].get<bool>();
  }
  return std::nullopt;
}

// text.format -> ResponseFormat.
std::optional<FieldError> ParseText(const json& body, ResponseFormat* format, json* echo) {
  if (!body.contains("text") || body["text"].is_null()) return std::nullopt;
  const json& text = body["text"];
  if (!text.is_object()) return Bad("text", "'text' must be an object");
  for (const auto& [key, value] : text.items()) {
    if (key != "format" && !(key == "verbosity" && (value.is_null() || value == "medium"))) {
      return Bad("text", "'text." + key + "' is not supported");
    }
  }
  if (!text.contains("format") || text["format"].is_null()) return std::nullopt;
  const json& f = text["format"];
  if (!f.is_object() || !f.contains("type") || !f["type"].is_string()) {
    return Bad("text", "'text.format' must be an object with a 'type'");
  }
  format->type = f["type"].get<std::string>();
  if (format->type == "json_schema") {
    if (!f.contains("name") || !f["name"].is_string()) return Bad("text", "'text.format.name' must be a string");
    if (!f.contains("schema") || !(f["schema"].is_object() || f["schema"].is_boolean())) {
      return Bad("text", "'text.format.schema' must be a JSON schema");
    }
    format->source = f["schema"].dump();
    if (f.contains("strict") && f["strict"].is_boolean()) format->strict = f["strict"].get<bool>();
  } else if (format->type != "text" && format->type != "json_object") {
    return Bad("text", "'text.format.type' must be text, json_object or json_schema");
  }
  *echo = text;
  return std::nullopt;
}

std::optional<FieldError> ParseResponses(const json& body, const ApiContext& ctx, ResponseStore* store,
                                         const Caller& caller, ResponsesJob* job) {
  if (!body.is_object()) return FieldError{InvalidArgumentError("the request body must be a JSON object"), ""};
  for (const auto& [key, value] : body.items()) {
    if (kFields.count(key) || ctx.ignore_unknown_fields) continue;
    return FieldError{UnknownFieldError(key), key};
  }
  // Fields this server takes only at their default.
  auto at_default = [&](const char* key, std::initializer_list<json> ok) {
    if (!body.contains(key) || body[key].is_null()) return true;
    for (const json& v : ok) {
      if (body[key] == v) return true;
    }
    return false;
  };
  if (!at_default("truncation", {"disabled"})) return Bad("truncation", "only truncation 'disabled' is supported");
  if (!at_default("background", {false})) return Bad("background", "background responses are not supported");
  if (!at_default("service_tier", {"auto", "default"})) return Bad("service_tier", "service tiers are not supported");
  if (!at_default("top_logprobs", {0})) return Bad("top_logprobs", "top_logprobs are not supported here");
  if (body.contains("reasoning") && !body["reasoning"].is_null() && !body["reasoning"].empty()) {
    return Bad("reasoning", "reasoning options are not supported");
  }
  if (body.contains("include") && !body["include"].is_null() && !body["include"].empty()) {
    return Bad("include", "'include' is not supported");
  }
  if (body.contains("model") && !body["model"].is_null()) {
    if (!body["model"].is_string()) return Bad("model", "'model' must be a string");
    auto adapter = AdapterOfModel(body["model"].get<std::string>(), ctx.model_id, *ctx.engine);
    if (!adapter.ok()) return FieldError{adapter.status(), "model"};
    job->request.lora = *adapter;
  }
  if (body.contains("user") && !body["user"].is_null() && !body["user"].is_string()) {
    return Bad("user", "'user' must be a string");
  }
  if (!body.contains("input")) return Bad("input", "'input' is required");
  if (auto e = ParseInput(body["input"], &job->input)) return e;
  if (body.contains("instructions") && !body["instructions"].is_null()) {
    if (!body["instructions"].is_string()) return Bad("instructions", "'instructions' must be a string");
    job->instructions = body["instructions"].get<std::string>();
  }
  auto boolean = [&](const char* key, bool* out) -> std::optional<FieldError> {
    if (!body.contains(key) || body[key].is_null()) return std::nullopt;
    if (!body[key].is_boolean()) return Bad(key, std::string("'") + key + "' must be a boolean");
    *out = body[key].get<bool>();
    return std::nullopt;
  };
  if (auto e = boolean("stream", &job->stream)) return e;
  if (auto e = boolean("store", &job->store)) return e;
  if (job->store && (store == nullptr || !store->enabled())) {
    job->store = false;  // storing is off on this server: the response says store false
  }
  if (body.contains("metadata") && !body["metadata"].is_null()) {
    const json& m = body["metadata"];
    if (!m.is_object() || m.size() > 16) return Bad("metadata", "'metadata' must be an object of at most 16 strings");
    for (const auto& [k, v] : m.items()) {
      if (!v.is_string() || k.size() > 64 || v.get<std::string>().size() > 512) {
        return Bad("metadata", "metadata keys are at most 64 characters and values strings of at most 512");
      }
    }
    job->metadata = m;
  }
  engine::GenerateRequest& r = job->request;
  auto number = [&](const char* key, double lo, double hi, double* out) -> std::optional<FieldError> {
    if (!body.contains(key) || body[key].is_null()) return std::nullopt;
    if (!body[key].is_number() || !(body[key].get<double>() >= lo && body[key].get<double>() <= hi)) {
      return Bad(key, std::string("'") + key + "' must be a number in [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "]");
    }
    *out = body[key].get<double>();
    return std::nullopt;
  };
  if (auto e = number("temperature", 0, 2, &job->temperature)) return e;
  if (auto e = number("top_p", 1e-9, 1, &job->top_p)) return e;
  r.sampling.temperature = static_cast<float>(job->temperature);
  r.sampling.top_p = static_cast<float>(job->top_p);
  r.max_tokens = ctx.limits.default_max_tokens;
  if (body.contains("max_output_tokens") && !body["max_output_tokens"].is_null()) {
    const json& m = body["max_output_tokens"];
    if (!m.is_number_integer() || m.get<int64_t>() < 1 || m.get<int64_t>() > (1 << 24)) {
      return Bad("max_output_tokens", "'max_output_tokens' must be an integer of at least 1");
    }
    r.max_tokens = m.get<int>();
    job->max_output_tokens = m;
  }
  if (body.contains("cache_salt") && !body["cache_salt"].is_null()) {
    Status s = body["cache_salt"].is_string() ? ApplyCacheSalt(body["cache_salt"].get<std::string>(), &r)
                                              : InvalidArgumentError("'cache_salt' must be a string");
    if (!s.ok()) return FieldError{s, "cache_salt"};
  }
  if (body.contains("previous_response_id") && !body["previous_response_id"].is_null()) {
    if (!body["previous_response_id"].is_string()) {
      return Bad("previous_response_id", "'previous_response_id' must be a string");
    }
    job->previous_response_id = body["previous_response_id"].get<std::string>();
    std::optional<StoredResponse> prev = store ? store->Get(job->previous_response_id) : std::nullopt;
    if (prev && prev->tenant != caller.tenant && !caller.admin) prev.reset();  // another key's: not here
    if (!prev) {
      return FieldError{NotFoundError("no stored response '" + job->previous_response_id +
                                      "' (never stored, expired or evicted)"),
                        "previous_response_id"};
    }
    job->history = std::move(prev->conversation);
  }
  if (auto e = ParseTools(body, job)) return e;
  ResponseFormat format;
  json text_echo;
  if (auto e = ParseText(body, &format, &text_echo)) return e;
  if (!text_echo.is_null()) job->text = text_echo;
  if (Status s = ApplyResponseFormat(format, ctx.limits, *ctx.engine, &r); !s.ok()) return FieldError{s, "text"};
  if (Status s = ApplyTools(&job->tools, ctx.limits, *ctx.engine, &r); !s.ok()) {
    return FieldError{s, s.message().rfind("tool_choice", 0) == 0       ? "tool_choice"
                         : s.message().rfind("response_format", 0) == 0 ? "text"
                                                                        : "tools"};
  }
  // The prompt: instructions, the stored conversation, this input.
  std::vector<engine::ChatMessage> messages;
  if (!job->instructions.empty()) messages.push_back({"system", job->instructions});
  messages.insert(messages.end(), job->history.begin(), job->history.end());
  messages.insert(messages.end(), job->input.begin(), job->input.end());
  auto prompt = ctx.engine->ChatPrompt(messages, job->tools.active() ? job->tools.tools : std::vector<engine::ToolSpec>{});
  if (!prompt.ok()) return FieldError{prompt.status(), "input"};
  r.prompt = std::move(prompt).value();
  return std::nullopt;
}

std::string ItemId(std::string_view prefix) { return NewId(prefix); }

json MessageItem(const std::string& id, const std::string& text, const std::string& status) {
  json content = json::array();
  if (status == "completed") {
    content.push_back({{"type", "output_text"}, {"text", SanitizeUtf8(text)}, {"annotations", json::array()}});
  }
  return {{"type", "message"}, {"id", id}, {"status", status}, {"role", "assistant"}, {"content", content}};
}

json CallItem(const std::string& id, const engine::ToolCall& call, const std::string& status) {
  return {{"type", "function_call"},
          {"id", id},
          {"call_id", call.id},
          {"name", call.name},
          {"arguments", status == "completed" ? call.arguments : ""},
          {"status", status}};
}

// A response's typed events, or its collected output.
class ResponsesStream final : public GenerationStream {
 public:
  ResponsesStream(const ResponsesJob& job, ResponseWriter& w) : job_(job), w_(w), filter_(job.tools) {}

  bool Begin(const json& skeleton) {
    if (begun_) return !gone_;
    begun_ = true;
    if (!job_.stream) return true;
    gone_ = !w_.StartStream();
    if (gone_) return false;
    json created = skeleton;
    return Event("response.created", {{"response", created}}) && Event("response.in_progress", {{"response", created}});
  }
  void set_skeleton(json s) { skeleton_ = std::move(s); }

  bool ClientGone() override { return (begun_ && gone_) || w_.ClientGone(); }

  bool OnEvent(int, const engine::GenerateEvent& ev, bool) override {
    if (!Begin(skeleton_)) return false;
    std::string text = job_.tools.active() ? filter_.Push(ev.text) : ev.text;
    if (ev.final && job_.tools.active()) {
      ToolCallFilter::End end = filter_.Finish();
      text += end.content;
      calls_ = std::move(end.calls);
    }
    if (!text.empty() && !AddText(text)) return false;
    if (!ev.final) return true;
    // Close the message, then each call as its own item.
    if (message_open_ && !CloseMessage()) return false;
    for (const engine::ToolCall& call : calls_) {
      const std::string id = ItemId("fc_");
      const int index = static_cast<int>(items_.size());
      items_.push_back(CallItem(id, call, "completed"));
      if (!job_.stream) continue;
      if (!Event("response.output_item.added", {{"output_index", index}, {"item", CallItem(id, call, "in_progress")}}) ||
          !Event("response.function_call_arguments.delta",
                 {{"item_id", id}, {"output_index", index}, {"delta", call.arguments}}) ||
          !Event("response.function_call_arguments.done",
                 {{"item_id", id}, {"output_index", index}, {"arguments", call.arguments}}) ||
          !Event("response.output_item.done", {{"output_index", index}, {"item", items_.back()}})) {
        return false;
      }
    }
    return true;
  }

  bool Event(const std::string& type, json fields) {
    json j{{"type", type}, {"sequence_number", sequence_++}};
    for (auto& [k, v] : fields.items()) j[k] = v;
    return w_.SendEvent("event: " + type + "\n" + SseData(j));
  }

  const json& items() const { return items_; }
  const std::string& text() const { return text_; }
  const std::vector<engine::ToolCall>& calls() const { return calls_; }

 private:
  bool AddText(const std::string& text) {
    if (!message_open_) {
      message_open_ = true;
      message_id_ = ItemId("msg_");
      message_index_ = static_cast<int>(items_.size());
      items_.push_back(nullptr);  // filled when the message closes
      if (job_.stream &&
          (!Event("response.output_item.added",
                  {{"output_index", message_index_}, {"item", MessageItem(message_id_, "", "in_progress")}}) ||
           !Event("response.content_part.added",
                  {{"item_id", message_id_}, {"output_index", message_index_}, {"content_index", 0},
                   {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}}))) {
        return false;
      }
    }
    text_ += text;
    return !job_.stream || Event("response.output_text.delta", {{"item_id", message_id_},
                                                                {"output_index", message_index_},
                                                                {"content_index", 0},
                                                                {"delta", SanitizeUtf8(text)}});
  }

  bool CloseMessage() {
    message_open_ = false;
    items_[message_index_] = MessageItem(message_id_, text_, "completed");
    if (!job_.stream) return true;
    const json part = items_[message_index_]["content"][0];
    return Event("response.output_text.done", {{"item_id", message_id_}, {"output_index", message_index_},
                                               {"content_index", 0}, {"text", part["text"]}}) &&
           Event("response.content_part.done", {{"item_id", message_id_}, {"output_index", message_index_},
                                                {"content_index", 0}, {"part", part}}) &&
           Event("response.output_item.done", {{"output_index", message_index_}, {"item", items_[message_index_]}});
  }

  const ResponsesJob& job_;
  ResponseWriter& w_;
  ToolCallFilter filter_;
  json skeleton_;
  json items_ = json::array();
  std::string text_;
  std::vector<engine::ToolCall> calls_;
  std::string message_id_;
  int message_index_ = -1;
  bool message_open_ = false;
  bool begun_ = false, gone_ = false;
  int sequence_ = 0;
};

json ResponseObject(const ResponsesJob& job, const std::string& id, int64_t created, const std::string& model,
                    const std::string& status) {
  return {{"id", id},
          {"object", "response"},
          {"created_at", created},
          {"status", status},
          {"error", nullptr},
          {"incomplete_details", nullptr},
          {"instructions", job.instructions.empty() ? json(nullptr) : json(job.instructions)},
          {"max_output_tokens", job.max_output_tokens},
          {"model", model},
          {"output", json::array()},
          {"parallel_tool_calls", job.tools.parallel},
          {"previous_response_id", job.previous_response_id.empty() ? json(nullptr) : json(job.previous_response_id)},
          {"store", job.store},
          {"temperature", job.temperature},
          {"text", job.text},
          {"tool_choice", job.tool_choice},
          {"tools", job.tools_json},
          {"top_p", job.top_p},
          {"truncation", "disabled"},
          {"metadata", job.metadata},
          {"usage", nullptr}};
}

}  // namespace

void Router::Responses(const HttpRequest& req, ResponseWriter& w, const Caller& caller) {
  const std::string endpoint = "/v1/responses";
  RequestDeadline deadline(generation_->limits().request_timeout_s);
  auto body = AcceptBody(req, w, endpoint);
  if (!body) return;
  ResponsesJob job;
  if (auto e = ParseResponses(*body, options_.api, options_.responses, caller, &job)) {
    metrics_->CountRequest(endpoint, "invalid");
    w.Send(StatusResponse(e->status, e->param));
    return;
  }
  const std::string id = NewId("resp_");
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  const std::string model = options_.api.model_id + (job.request.lora.empty() ? "" : ":" + job.request.lora);
  job.request.id = id;
  job.request.cache_salt = TenantCacheSalt(caller.tenant, job.request.cache_salt);
  std::vector<engine::GenerateRequest> choices{job.request};
  ResponsesStream stream(job, w);
  stream.set_skeleton(ResponseObject(job, id, created, model, "in_progress"));
  std::string field;
  auto run = generation_->Run(endpoint, std::move(choices), deadline, stream, &field, 0, caller.tenant);
  if (!run.ok()) {
    w.Send(StatusResponse(run.status(), field == "prompt" ? "input" : field == "max_tokens" ? "max_output_tokens"
                                                                                             : field));
    return;
  }
  if (run->outcome == Outcome::kAborted) return;
  const engine::GenerateEvent& fin = run->finals.front();
  const bool failed = run->outcome == Outcome::kError || run->outcome == Outcome::kTimeout ||
                      run->outcome == Outcome::kShutdown;
  json response = ResponseObject(job, id, created, model,
                                 failed ? "failed" : fin.finish_reason == engine::FinishReason::kLength ? "incomplete"
                                                                                                        : "completed");
  response["output"] = stream.items();
  if (fin.finish_reason == engine::FinishReason::kLength) {
    response["incomplete_details"] = {{"reason", "max_output_tokens"}};
  }
  if (failed) {
    const Status err = run->error.ok() ? UnavailableError("the server shut down") : run->error;
    response["error"] = {{"code", run->outcome == Outcome::kTimeout ? "timeout" : "server_error"},
                         {"message", err.message()}};
  }
  response["usage"] = {{"input_tokens", fin.usage.prompt_tokens},
                       {"input_tokens_details", {{"cached_tokens", fin.usage.cached_prompt_tokens}}},
                       {"output_tokens", fin.usage.completion_tokens},
                       {"output_tokens_details", {{"reasoning_tokens", 0}}},
                       {"total_tokens", fin.usage.prompt_tokens + fin.usage.completion_tokens}};
  const std::string text = response.dump(-1, ' ', false, json::error_handler_t::replace);
  if (job.store && !failed) {
    StoredResponse stored;
    stored.id = id;
    stored.conversation = job.history;
    stored.conversation.insert(stored.conversation.end(), job.input.begin(), job.input.end());
    engine::ChatMessage out{"assistant", stream.text()};
    out.tool_calls = stream.calls();
    stored.conversation.push_back(std::move(out));
    stored.response_json = text;
    stored.cache_salt = job.request.cache_salt;
    stored.tenant = caller.tenant;
    options_.responses->Put(std::move(stored));
  }
  if (job.stream) {
    if (!stream.Begin(ResponseObject(job, id, created, model, "in_progress"))) return;
    const std::string type = failed ? "response.failed" : response["status"] == "incomplete" ? "response.incomplete"
                                                                                             : "response.completed";
    stream.Event(type, {{"response", response}});
    w.EndStream();
    return;
  }
  if (failed) {
    w.Send(StatusResponse(run->error.ok() ? UnavailableError("the server shut down") : run->error));
    return;
  }
  w.Send(JsonResponse(http::status::ok, text));
}

void Router::StoredResponseRoute(const HttpRequest& req, ResponseWriter& w, const std::string& id,
                                 const Caller& caller) {
  const bool get = req.method() == http::verb::get, del = req.method() == http::verb::delete_;
  if (!get && !del) {
    w.Send(ErrorResponse(http::status::method_not_allowed, "/v1/responses/{id} takes GET or DELETE",
                         "invalid_request_error"));
    return;
  }
  if (options_.responses == nullptr) {
    w.Send(StatusResponse(NotFoundError("no stored response '" + id + "'"), "response_id"));
    return;
  }
  auto stored = options_.responses->Get(id);
  if (stored && stored->tenant != caller.tenant && !caller.admin) stored.reset();  // another key's: not here
  if (del) {
    if (!stored || !options_.responses->Erase(id)) {
      w.Send(StatusResponse(NotFoundError("no stored response '" + id + "'"), "response_id"));
      return;
    }
    w.Send(JsonResponse(http::status::ok, json{{"id", id}, {"object", "response.deleted"}, {"deleted", true}}.dump()));
    return;
  }
  if (!stored) {
    w.Send(StatusResponse(NotFoundError("no stored response '" + id + "' (never stored, expired or evicted)"),
                          "response_id"));
    return;
  }
  w.Send(JsonResponse(http::status::ok, stored->response_json));
}

}  // namespace tq::server
