#include "server/http/openai.h"

#include <cmath>
#include <set>

#include "server/http/route_util.h"


namespace tq::server {
namespace {

using json = nlohmann::ordered_json;

// Reads optional field `name` of `body`. Returns false (and fills error) on a wrong type or range.
class Fields {
 public:
  Fields(const json& body, ParseError* error) : body_(body), error_(error) {}

  bool Fail(const std::string& name, const std::string& message) {
    error_->status = InvalidArgumentError(message);
    error_->param = name;
    return false;
  }

  template <typename T>
  bool Number(const std::string& name, double lo, double hi, T* out) {
    auto it = body_.find(name);
    if (it == body_.end() || it->is_null()) return true;
    if (!it->is_number()) return Fail(name, "'" + name + "' must be a number");
    const double v = it->get<double>();
    if (std::is_integral_v<T> && (!it->is_number_integer() && v != std::floor(v))) {
      return Fail(name, "'" + name + "' must be an integer");
    }
    if (!(v >= lo && v <= hi)) {
      return Fail(name, "'" + name + "' = " + it->dump() + " is outside [" + Trim(lo) + ", " + Trim(hi) + "]");
    }
    *out = static_cast<T>(v);
    return true;
  }

  bool Bool(const std::string& name, bool* out) {
    auto it = body_.find(name);
    if (it == body_.end() || it->is_null()) return true;
    if (!it->is_boolean()) return Fail(name, "'" + name + "' must be a boolean");
    *out = it->get<bool>();
    return true;
  }

  bool Has(const std::string& name) const {
    auto it = body_.find(name);
    return it != body_.end() && !it->is_null();
  }

 private:
  static std::string Trim(double v) {
    std::string s = std::to_string(v);
    while (s.find('.') != std::string::npos && (s.back() == '0' || s.back() == '.')) {
      const bool dot = s.back() == '.';
      s.pop_back();
      if (dot) break;
    }
    return s;
  }

  const json& body_;
  ParseError* error_;
};

bool ParseStop(const json& body, std::vector<std::string>* stop, ParseError* error) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return true;
  auto fail = [&](const std::string& m) {
    error->status = InvalidArgumentError(m);
    error->param = "stop";
    return false;
  };
  if (it->is_string()) {
    stop->push_back(it->get<std::string>());
  } else if (it->is_array()) {
    for (const json& s : *it) {
      if (!s.is_string()) return fail("'stop' must be a string or a list of strings");
      stop->push_back(s.get<std::string>());
    }
  } else {
    return fail("'stop' must be a string or a list of strings");
  }
  return true;
}

// Fields each endpoint takes. Anything else is a 400 naming it (unless the server ignores unknown fields), and the
// OpenAI fields this server does not implement are refused whatever the setting, unless absent or empty.
const std::set<std::string, std::less<>> kCommonFields = {
    "model", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "max_tokens", "n", "seed", "stream", "stream_options", "ignore_eos", "stop", "logprobs",
    "response_format", "logit_bias", "user", "cache_salt"};
const std::set<std::string, std::less<>> kChatFields = {"messages", "max_completion_tokens", "top_logprobs", "tools",
                                                       "tool_choice", "parallel_tool_calls"};
const std::set<std::string, std::less<>> kCompletionFields = {"prompt", "echo", "suffix", "best_of"};
const std::set<std::string, std::less<>> kUnsupportedFields = {
    "tools", "tool_choice", "functions", "function_call", "parallel_tool_calls", "store", "metadata",
    "service_tier", "modalities", "audio", "prediction", "reasoning_effort", "web_search_options"};

bool IsEmpty(const json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) || ((v.is_array() || v.is_object()) && v.empty()) ||
         (v.is_string() && v.get<std::string>().empty());
}

bool CheckFields(const json& body, bool chat, const ApiContext& ctx, ParseError* error) {
  for (const auto& [key, value] : body.items()) {
    if (kCommonFields.count(key) || (chat ? kChatFields : kCompletionFields).count(key)) continue;
    if (kUnsupportedFields.count(key)) {
      if (IsEmpty(value)) continue;
      error->status = InvalidArgumentError("'" + key + "' is not supported by this server");
      error->param = key;
      return false;
    }
    if (ctx.ignore_unknown_fields) continue;
    error->status = UnknownFieldError(key);
    error->param = key;
    return false;
  }
  // Completions fields whose other values this server does not implement.
  if (!chat) {
    if (body.contains("echo") && !IsEmpty(body["echo"])) {
      error->status = InvalidArgumentError("'echo' is not supported by this server");
      error->param = "echo";
      return false;
    }
    if (body.contains("suffix") && !IsEmpty(body["suffix"])) {
      error->status = InvalidArgumentError("'suffix' (insertion) is not supported by this server");
      error->param = "suffix";
      return false;
    }
    if (body.contains("best_of") && !body["best_of"].is_null() && body["best_of"] != 1) {
      error->status = InvalidArgumentError("'best_of' other than 1 is not supported by this server");
      error->param = "best_of";
      return false;
    }
  }
  if (body.contains("user") && !body["user"].is_null() && !body["user"].is_string()) {
    error->status = InvalidArgumentError("'user' must be a string");
    error->param = "user";
    return false;
  }
  return true;
}

// response_format: {"type": "text" | "json_object"} | {"type": "json_schema", "json_schema": {"name", "schema",
// "strict", "description"}} | {"type": "regex", "regex": "..."} | {"type": "grammar", "grammar": "..."}.
bool ParseResponseFormat(const json& body, const ApiContext& ctx, engine::GenerateRequest* r, ParseError* error) {
  auto it = body.find("response_format");
  if (it == body.end() || it->is_null()) return true;
  auto fail = [&](const std::string& m) {
    error->status = InvalidArgumentError(m);
    error->param = "response_format";
    return false;
  };
  if (!it->is_object() || !it->contains("type") || !(*it)["type"].is_string()) {
    return fail("'response_format' must be an object with a string 'type'");
  }
  ResponseFormat format;
  format.type = (*it)["type"].get<std::string>();
  std::set<std::string, std::less<>> keys = {"type"};
  if (format.type == "json_schema") {
    keys.insert("json_schema");
    auto js = it->find("json_schema");
    if (js == it->end() || !js->is_object()) return fail("'response_format.json_schema' must be an object");
    for (const auto& [key, value] : js->items()) {
      if (key != "name" && key != "schema" && key != "strict" && key != "description") {
        return fail("unknown field 'response_format.json_schema." + key + "'");
      }
    }
    if (!js->contains("name") || !(*js)["name"].is_string()) {
      return fail("'response_format.json_schema.name' must be a string");
    }
    if (js->contains("strict") && !(*js)["strict"].is_null()) {
      if (!(*js)["strict"].is_boolean()) return fail("'response_format.json_schema.strict' must be a boolean");
      format.strict = (*js)["strict"].get<bool>();
    }
    auto schema = js->find("schema");
    if (schema == js->end() || schema->is_null()) {
      format.source = "{}";  // OpenAI: no schema means any JSON
    } else if (!schema->is_object() && !schema->is_boolean()) {
      return fail("'response_format.json_schema.schema' must be a JSON schema object");
    } else {
      format.source = schema->dump();
    }
  } else if (format.type == "regex" || format.type == "grammar") {
    keys.insert(format.type);
    auto src = it->find(format.type);
    if (src == it->end() || !src->is_string()) {
      return fail("'response_format." + format.type + "' must be a string");
    }
    format.source = src->get<std::string>();
  }
  for (const auto& [key, value] : it->items()) {
    if (!keys.count(key)) return fail("unknown field 'response_format." + key + "'");
  }
  if (Status s = ApplyResponseFormat(format, ctx.limits, *ctx.engine, r); !s.ok()) {
    error->status = s;
    error->param = "response_format";
    return false;
  }
  return true;
}

// logit_bias: {"token id": bias, ...} (ids as strings, as OpenAI sends them).
bool ParseLogitBias(const json& body, const ApiContext& ctx, engine::GenerateRequest* r, ParseError* error) {
  auto it = body.find("logit_bias");
  if (it == body.end() || it->is_null()) return true;
  auto fail = [&](const Status& s) {
    error->status = s;
    error->param = "logit_bias";
    return false;
  };
  if (!it->is_object()) return fail(InvalidArgumentError("'logit_bias' must be an object of token id -> bias"));
  std::vector<std::pair<int64_t, double>> bias;
  for (const auto& [key, value] : it->items()) {
    int64_t id = -1;
    size_t used = 0;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != key.size()) {
      return fail(InvalidArgumentError("logit_bias: key '" + key + "' is not a token id"));
    }
    if (!value.is_number()) return fail(InvalidArgumentError("logit_bias: the bias of '" + key + "' must be a number"));
    bias.emplace_back(id, value.get<double>());
  }
  if (Status s = ApplyLogitBias(bias, ctx.limits, ctx.vocab_size, r); !s.ok()) return fail(s);
  return true;
}

}  // namespace

std::string OpenAiFinishReason(engine::FinishReason reason) {
  // OpenAI's own reasons where they exist; ours otherwise (the same words as engine::FinishReasonName).
  switch (reason) {
    case engine::FinishReason::kNone: return "none";
    case engine::FinishReason::kStop: return "stop";
    case engine::FinishReason::kLength: return "length";
    case engine::FinishReason::kAborted: return "abort";
    case engine::FinishReason::kShutdown: return "shutdown";
    case engine::FinishReason::kError: return "error";
  }
  return "error";
}

std::optional<CompletionJob> ParseCompletionRequest(const json& body, bool chat, const ApiContext& ctx,
                                                    ParseError* error) {
  if (!body.is_object()) {
    error->status = InvalidArgumentError("the request body must be a JSON object");
    return std::nullopt;
  }
  CompletionJob job;
  job.chat = chat;
  if (!CheckFields(body, chat, ctx, error)) return std::nullopt;
  Fields f(body, error);
  engine::GenerateRequest& r = job.request;

  // model: optional; when given it must be the served model.
  if (f.Has("model")) {
    const json& m = body["model"];
    if (!m.is_string()) {
      f.Fail("model", "'model' must be a string");
      return std::nullopt;
    }
    auto adapter = AdapterOfModel(m.get<std::string>(), ctx.model_id, *ctx.engine);
    if (!adapter.ok()) {
      error->status = adapter.status();
      error->param = "model";
      return std::nullopt;
    }
    r.lora = *adapter;
  }

  // The prompt.
  if (chat) {
    auto it = body.find("messages");
    if (it == body.end() || !it->is_array() || it->empty()) {
      f.Fail("messages", "'messages' must be a non-empty list of {role, content} objects");
      return std::nullopt;
    }
    if (!ParseTools(body, ctx, &job.tools, error)) return std::nullopt;
    std::vector<engine::ChatMessage> messages;
    for (const json& m : *it) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
        f.Fail("messages", "each message must be an object with a string 'role'");
        return std::nullopt;
      }
      std::string content;
      if (m.contains("content") && m["content"].is_string()) {
        content = m["content"].get<std::string>();
      } else if (m.contains("content") && m["content"].is_array()) {
        // [{"type": "text", "text": "..."}]: text parts only.
        for (const json& part : m["content"]) {
          // Type-checked before reading: json::value() throws when a present key has another type.
          if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
              !part["text"].is_string()) {
            f.Fail("messages", "only text content parts are supported");
            return std::nullopt;
          }
          content += part["text"].get<std::string>();
        }
      } else if (!(m.contains("content") && m["content"].is_null()) &&
                 !(m["role"] == "assistant" && m.contains("tool_calls"))) {
        f.Fail("messages", "each message needs a string 'content'");
        return std::nullopt;
      }
      if (!IsValidUtf8(content)) {
        f.Fail("messages", "message content is not valid UTF-8");
        return std::nullopt;
      }
      engine::ChatMessage message{m["role"].get<std::string>(), std::move(content)};
      if (!ParseMessageToolFields(m, &message, error)) return std::nullopt;
      messages.push_back(std::move(message));
    }
    // tool_choice none: the tools are not shown, so the model has nothing to call.
    auto prompt = ctx.engine->ChatPrompt(messages, job.tools.active() ? job.tools.tools : std::vector<engine::ToolSpec>{});
    if (!prompt.ok()) {
      error->status = prompt.status();
      error->param = "messages";
      return std::nullopt;
    }
    r.prompt = std::move(prompt).value();
  } else {
    auto it = body.find("prompt");
    if (it == body.end() || it->is_null()) {
      f.Fail("prompt", "'prompt' is required");
      return std::nullopt;
    }
    const json* p = &*it;
    if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = &(*p)[0];
    if (p->is_string()) {
      const std::string text = p->get<std::string>();
      if (!IsValidUtf8(text)) {
        f.Fail("prompt", "'prompt' is not valid UTF-8");
        return std::nullopt;
      }
      r.prompt = ctx.engine->Tokenize(text, {.add_special = true, .parse_special = false});
    } else if (p->is_array() && !p->empty() && (*p)[0].is_number_integer()) {
      for (const json& t : *p) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= ctx.vocab_size) {
          f.Fail("prompt", "token ids in 'prompt' must be integers in [0, " + std::to_string(ctx.vocab_size) + ")");
          return std::nullopt;
        }
        r.prompt.push_back(t.get<int32_t>());
      }
    } else if (p->is_array() && p->size() > 1) {
      f.Fail("prompt", "one prompt per request: send a string or a list of token ids");
      return std::nullopt;
    } else {
      f.Fail("prompt", "'prompt' must be a string or a list of token ids");
      return std::nullopt;
    }
  }
  // Sampling and limits.
  engine::SamplingParams& s = r.sampling;
  int max_tokens = -1;
  int64_t seed = -1;
  if (!f.Number("temperature", 0, 2, &s.temperature) || !f.Number("top_p", 0, 1, &s.top_p) ||
      !f.Number("top_k", 0, 1e6, &s.top_k) || !f.Number("min_p", 0, 1, &s.min_p) ||
      !f.Number("presence_penalty", -2, 2, &s.presence_penalty) ||
      !f.Number("frequency_penalty", -2, 2, &s.frequency_penalty) ||
      !f.Number("repetition_penalty", 0.01, 10, &s.repetition_penalty) ||
      !f.Number("max_tokens", 0, 1e9, &max_tokens) || !f.Number("max_completion_tokens", 0, 1e9, &max_tokens) ||
      !f.Number("n", 1, ctx.limits.max_n, &job.n) || !f.Number("seed", -9.2e18, 9.2e18, &seed) ||
      !f.Bool("stream", &job.stream) || !f.Bool("ignore_eos", &r.ignore_eos)) {
    return std::nullopt;
  }
  if (f.Has("top_p") && s.top_p == 0.0f) {
    f.Fail("top_p", "'top_p' must be greater than 0");
    return std::nullopt;
  }
  if (f.Has("seed")) {
    s.seed = static_cast<uint64_t>(seed);
    s.has_seed = true;
  }
  if (max_tokens == 0) {
    f.Fail(f.Has("max_completion_tokens") ? "max_completion_tokens" : "max_tokens", "max_tokens must be at least 1");
    return std::nullopt;
  }
  if (max_tokens < 0) max_tokens = ctx.limits.default_max_tokens;
  r.max_tokens = max_tokens;
  if (!ParseStop(body, &r.stop, error)) return std::nullopt;
  if (f.Has("stream_options")) {
    const json& so = body["stream_options"];
    if (!so.is_object() || (so.contains("include_usage") && !so["include_usage"].is_boolean())) {
      f.Fail("stream_options", "'stream_options' must be an object with a boolean 'include_usage'");
      return std::nullopt;
    }
    job.include_usage = so.value("include_usage", false);
  }
  // logprobs: chat takes a boolean plus top_logprobs [0, 20]; completions take an integer [0, 20] (OpenAI's legacy
  // endpoint stops at 5; vLLM, like us, takes up to 20, which a near-tie check between two runs needs).
  if (chat) {
    if (!f.Bool("logprobs", &job.logprobs) || !f.Number("top_logprobs", 0, 20, &job.top_logprobs)) {
      return std::nullopt;
    }
    if (job.top_logprobs > 0 && !job.logprobs) {
      f.Fail("top_logprobs", "'top_logprobs' needs 'logprobs': true");
      return std::nullopt;
    }
  } else {
    int lp = -1;
    if (!f.Number("logprobs", 0, 20, &lp)) return std::nullopt;
    job.logprobs = lp >= 0;
    job.top_logprobs = std::max(lp, 0);
  }
  r.logprobs = job.logprobs;
  r.top_logprobs = job.top_logprobs;
  if (!ParseLogitBias(body, ctx, &r, error) || !ParseResponseFormat(body, ctx, &r, error)) return std::nullopt;
  if (f.Has("cache_salt")) {
    const json& salt = body["cache_salt"];
    Status st = salt.is_string() ? ApplyCacheSalt(salt.get<std::string>(), &r)
                                 : InvalidArgumentError("'cache_salt' must be a string");
    if (!st.ok()) {
      f.Fail("cache_salt", st.message());
      return std::nullopt;
    }
  }
  if (Status st = ApplyTools(&job.tools, ctx.limits, *ctx.engine, &r); !st.ok()) {
    error->status = st;
    error->param = st.message().rfind("tool_choice", 0) == 0       ? "tool_choice"
                   : st.message().rfind("response_format", 0) == 0 ? "response_format"
                                                                   : "tools";
    return std::nullopt;
  }
  // The server's limits (prompt length, max_tokens, stop strings) are checked by the admission path,
  // Generation::Run, for every front end alike.
  return job;
}

json UsageJson(const engine::Usage& u) {
  json j{{"prompt_tokens", u.prompt_tokens},
         {"completion_tokens", u.completion_tokens},
         {"total_tokens", u.prompt_tokens + u.completion_tokens}};
  j["prompt_tokens_details"] = {{"cached_tokens", u.cached_prompt_tokens}};
  return j;
}

namespace {

json LogprobsJson(const CompletionJob& job, const std::vector<engine::GeneratedToken>& tokens,
                  const engine::EngineApi& engine) {
  if (!job.logprobs) return nullptr;
  if (job.chat) {
    json content = json::array();
    for (const auto& t : tokens) {
      json top = json::array();
      for (const auto& alt : t.top) {
        top.push_back({{"token", SanitizeUtf8(engine.TokenText(alt.token))}, {"logprob", alt.logprob}});
      }
      content.push_back({{"token", SanitizeUtf8(engine.TokenText(t.id))}, {"logprob", t.logprob}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json out{{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}};
  for (const auto& t : tokens) {
    out["tokens"].push_back(SanitizeUtf8(engine.TokenText(t.id)));
    out["token_logprobs"].push_back(t.logprob);
    json top = json::object();
    for (const auto& alt : t.top) top[SanitizeUtf8(engine.TokenText(alt.token))] = alt.logprob;
    out["top_logprobs"].push_back(top);
  }
  return out;
}

}  // namespace

json CompletionResponse(const CompletionJob& job, const std::string& id, int64_t created, const std::string& model,
                        const std::vector<std::string>& texts, const std::vector<engine::GenerateEvent>& finals,
                        const std::vector<std::vector<engine::GeneratedToken>>& tokens, const engine::EngineApi& engine) {
  json choices = json::array();
  engine::Usage usage;
  for (size_t i = 0; i < texts.size(); ++i) {
    json c{{"index", i}, {"finish_reason", OpenAiFinishReason(finals[i].finish_reason)},
           {"logprobs", LogprobsJson(job, tokens[i], engine)}};
    engine::ParsedToolCalls parsed;
    if (job.tools.active()) parsed = engine::ParseToolCalls(job.tools.format, texts[i], job.tools.tools);
    if (!parsed.calls.empty()) {
      NameToolCalls(&parsed.calls);
      c["message"] = {{"role", "assistant"},
                      {"content", parsed.content.empty() ? json(nullptr) : json(SanitizeUtf8(parsed.content))},
                      {"tool_calls", ToolCallsJson(parsed.calls)}};
      if (finals[i].finish_reason == engine::FinishReason::kStop) c["finish_reason"] = "tool_calls";
    } else if (job.chat) {
      c["message"] = {{"role", "assistant"}, {"content", SanitizeUtf8(texts[i])}};
    } else {
      c["text"] = SanitizeUtf8(texts[i]);
    }
    choices.push_back(std::move(c));
    usage.prompt_tokens = finals[i].usage.prompt_tokens;
    usage.completion_tokens += finals[i].usage.completion_tokens;
    usage.cached_prompt_tokens = finals[i].usage.cached_prompt_tokens;
  }
  return {{"id", id},
          {"object", job.chat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", choices},
          {"usage", UsageJson(usage)}};
}

json StreamChunk(const CompletionJob& job, const std::string& id, int64_t created, const std::string& model, int index,
                 const std::string& text, const std::vector<engine::GeneratedToken>& tokens,
                 const std::string& finish_reason, bool first, const engine::EngineApi& engine) {
  json c{{"index", index}, {"finish_reason", finish_reason.empty() ? json(nullptr) : json(finish_reason)},
         {"logprobs", tokens.empty() ? json(nullptr) : LogprobsJson(job, tokens, engine)}};
  if (job.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && finish_reason.empty())) delta["content"] = SanitizeUtf8(text);
    c["delta"] = delta;
  } else {
    c["text"] = SanitizeUtf8(text);
  }
  json j{{"id", id},
         {"object", job.chat ? "chat.completion.chunk" : "text_completion"},
         {"created", created},
         {"model", model},
         {"choices", json::array({c})}};
  if (job.include_usage) j["usage"] = nullptr;
  return j;
}

json ToolCallChunk(const CompletionJob& job, const std::string& id, int64_t created, const std::string& model,
                   int index, std::vector<engine::ToolCall> calls) {
  json list = ToolCallsJson(calls);
  for (size_t k = 0; k < list.size(); ++k) list[k]["index"] = k;
  json c{{"index", index}, {"finish_reason", nullptr}, {"logprobs", nullptr},
         {"delta", {{"tool_calls", list}}}};
  json j{{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model},
         {"choices", json::array({c})}};
  if (job.include_usage) j["usage"] = nullptr;
  return j;
}

json UsageChunk(const CompletionJob& job, const std::string& id, int64_t created, const std::string& model,
                const engine::Usage& usage) {
  return {{"id", id},
          {"object", job.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array()},
          {"usage", UsageJson(usage)}};
}

}  // namespace tq::server
