// The server's limits on one generation request (config limits.*), checked the same way for every front end.
#pragma once

#include <optional>
#include <string>

#include "common/status.h"
#include "engine/api.h"

namespace tq::server {

// The server's limits on one generation request (config: limits.*).
struct RequestLimits {
  int max_prompt_tokens = 0;         // 0 = the context length minus one
  int max_tokens = 0;                // cap on a request's max_tokens; 0 = none
  int default_max_tokens = 256;      // when a request does not say
  int max_n = 16;                    // choices per request
  int max_stop = 4;                  // stop strings per request
  int max_stop_bytes = 256;          // length of one stop string
  int max_stop_tokens = 16;          // stop token ids per request
  int max_concurrent_requests = 0;   // generation requests at once, both front ends; 0 = unlimited
  double request_timeout_s = 0;      // from arrival until the request is aborted; 0 = none
  int64_t max_schema_bytes = 64 << 10;  // structured output: JSON schema, regex or grammar text
  int max_schema_depth = 32;            // structured output: nesting of a JSON schema
  int max_logit_bias = 300;             // logit_bias entries
  int max_embedding_inputs = 64;        // inputs of one embeddings request
};

// A request the limits refuse: invalid_argument, and the request field at fault ("prompt", "max_tokens", "stop",
// "stop_token_ids", "n"), which a front end may rename (chat: "messages").
struct LimitError {
  Status status;
  std::string field;
};

// The limits on one choice's request, for a context of `ctx_size` tokens and a vocabulary of `vocab_size` (the
// front end has already put limits.default_max_tokens where the client did not say).
std::optional<LimitError> CheckLimits(const RequestLimits& limits, int ctx_size, int vocab_size,
                                      const engine::GenerateRequest& request);

}  // namespace tq::server
