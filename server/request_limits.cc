#include "server/request_limits.h"

namespace tq::server {

std::optional<LimitError> CheckLimits(const RequestLimits& limits, int ctx_size, int vocab_size,
                                      const engine::GenerateRequest& r) {
  const auto fail = [](std::string field, std::string message) {
    return LimitError{InvalidArgumentError(std::move(message)), std::move(field)};
  };
  if (r.prompt.empty()) return fail("prompt", "the prompt is empty");
  const int max_prompt = limits.max_prompt_tokens > 0 ? limits.max_prompt_tokens : ctx_size - 1;
  if (static_cast<int>(r.prompt.size()) > max_prompt) {
    return fail("prompt", "the prompt has " + std::to_string(r.prompt.size()) +
                              " tokens; this server allows at most " + std::to_string(max_prompt));
  }
  if (r.max_tokens < 0) return fail("max_tokens", "max_tokens must not be negative");
  if (limits.max_tokens > 0 && (r.max_tokens == 0 || r.max_tokens > limits.max_tokens)) {
    return fail("max_tokens", "max_tokens = " + std::to_string(r.max_tokens) + " exceeds this server's limit of " +
                                  std::to_string(limits.max_tokens) + " (limits.max_tokens)");
  }
  if (static_cast<int>(r.stop.size()) > limits.max_stop) {
    return fail("stop", "at most " + std::to_string(limits.max_stop) + " stop strings are allowed");
  }
  for (const std::string& s : r.stop) {
    if (s.empty()) return fail("stop", "stop strings must not be empty");
    if (static_cast<int>(s.size()) > limits.max_stop_bytes) {
      return fail("stop", "a stop string has " + std::to_string(s.size()) + " bytes; the limit is " +
                              std::to_string(limits.max_stop_bytes));
    }
  }
  if (static_cast<int>(r.stop_tokens.size()) > limits.max_stop_tokens) {
    return fail("stop_token_ids", "at most " + std::to_string(limits.max_stop_tokens) + " stop token ids are allowed");
  }
  for (int32_t t : r.stop_tokens) {
    if (t < 0 || t >= vocab_size) {
      return fail("stop_token_ids", "stop token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                                        std::to_string(vocab_size) + ")");
    }
  }
  return std::nullopt;
}

}  // namespace tq::server
