// Request options that both front ends take and check the same way before admission: structured output
// (response_format) and logit_bias. Each front end only translates its wire form into these structs.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "engine/api.h"
#include "server/request_limits.h"

namespace tq::server {

// What the output must match. type: "text" (free), "json_object", "json_schema", "regex" or "grammar" (EBNF,
// start rule "root"). source: the schema as JSON text, the pattern or the grammar.
struct ResponseFormat {
  std::string type = "text";
  std::string source;
  bool strict = false;
};

// Compiles `format` into request->constraint (nothing for "text"). invalid_argument naming the problem: an unknown
// type, a source over limits.max_schema_bytes or nested deeper than limits.max_schema_depth, a malformed or
// unsupported schema, regex or grammar.
Status ApplyResponseFormat(const ResponseFormat& format, const RequestLimits& limits, const engine::EngineApi& engine,
                           engine::GenerateRequest* request);

// A request's function-calling part. active() when the output may hold calls (tools given, choice not none).
struct ToolJob {
  std::vector<engine::ToolSpec> tools;
  engine::ToolChoice choice;
  bool parallel = true;
  engine::ChatFormat format = engine::ChatFormat::kChatMl;  // set by ApplyTools
  bool active() const { return !tools.empty() && choice.mode != engine::ToolChoiceMode::kNone; }
};

// Checks the tools (names, schemas under limits.max_schema_depth, the named choice) and, when active, constrains
// the output to the chat format's call syntax (request->constraint). invalid_argument whose message starts with
// "tool_choice" when the choice is at fault; failed_precondition when the model has no chat format; a tools
// request that also has a response_format constraint is invalid_argument starting "response_format".
Status ApplyTools(ToolJob* tools, const RequestLimits& limits, const engine::EngineApi& engine,
                  engine::GenerateRequest* request);

// Streaming with tools: text passes as content up to where a call starts (or may start); at the end the calls
// come out whole (named "call_" + 24 hex digits) with any content that followed them.
class ToolCallFilter {
 public:
  explicit ToolCallFilter(const ToolJob& job) : job_(job) {}
  // The content that may be sent now.
  std::string Push(const std::string& text);
  struct End {
    std::string content;                  // content not sent yet
    std::vector<engine::ToolCall> calls;  // empty: the output held no calls
  };
  End Finish();

 private:
  const ToolJob& job_;
  std::string full_;
  size_t emitted_ = 0;
};

// Names the calls: "call_" and 24 hex digits.
void NameToolCalls(std::vector<engine::ToolCall>* calls);

// Sets request->cache_salt: at most 256 bytes of valid UTF-8 (invalid_argument otherwise). Requests share cached
// prompt KV only with requests of the same salt.
Status ApplyCacheSalt(const std::string& salt, engine::GenerateRequest* request);

// The prefix-cache salt of a request from `tenant` (Caller::tenant) that asked for `salt`: each API key's requests
// share cached KV only among themselves ("" tenant: no keys configured, the salt as given).
std::string TenantCacheSalt(const std::string& tenant, const std::string& salt);

// Sets request->sampling.logit_bias. invalid_argument for more than limits.max_logit_bias entries, an id outside
// [0, vocab_size) or a bias outside [-100, 100].
Status ApplyLogitBias(const std::vector<std::pair<int64_t, double>>& bias, const RequestLimits& limits,
                      int vocab_size, engine::GenerateRequest* request);

// The LoRA adapter a request's `model` names: "" for the served model, NAME for "MODEL:NAME" or a loaded adapter's
// own name; not_found (listing what is served) otherwise.
StatusOr<std::string> AdapterOfModel(const std::string& asked, const std::string& served,
                                     const engine::EngineApi& engine);

}  // namespace tq::server
