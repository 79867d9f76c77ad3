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

// Sets request->sampling.logit_bias. invalid_argument for more than limits.max_logit_bias entries, an id outside
// [0, vocab_size) or a bias outside [-100, 100].
Status ApplyLogitBias(const std::vector<std::pair<int64_t, double>>& bias, const RequestLimits& limits,
                      int vocab_size, engine::GenerateRequest* request);

}  // namespace tq::server
