// Token sampling: penalties, then greedy or temperature with top-k, top-p and min-p, from a seeded generator.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tq::engine {

struct SamplingParams {
  float temperature = 1.0f;         // [0, 100]; 0 = greedy
  int top_k = 0;                    // >= 0; 0 = off
  float top_p = 1.0f;               // (0, 1]
  float min_p = 0.0f;               // [0, 1]: drop tokens below min_p * p(most likely)
  float repetition_penalty = 1.0f;  // (0, 10]: logits of seen tokens divided (if > 0) or multiplied (if < 0)
  float frequency_penalty = 0.0f;   // [-2, 2]: minus penalty * count of the token in the window
  float presence_penalty = 0.0f;    // [-2, 2]: minus penalty if the token is in the window
  int penalty_window = 64;          // >= 0: how many of the latest tokens the penalties look at
  uint64_t seed = 0;
  bool has_seed = false;            // false: seeded from std::random_device
  // Added to the logits of these token ids before the penalties ([-100, 100] each; -100 all but bans a token,
  // +100 all but forces it). Ids outside the logits are skipped (the front end refuses them).
  std::vector<std::pair<int32_t, float>> logit_bias;
};

// invalid_argument naming the first field out of its range.
Status ValidateSamplingParams(const SamplingParams& p);

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Picks the next token from `logits` ([vocab], changed in place by the penalties). `history` holds the
  // sequence's tokens so far (prompt and output); penalties look at its last penalty_window entries.
  int32_t Sample(std::span<float> logits, std::span<const int32_t> history);

 private:
  void ApplyPenalties(std::span<float> logits, std::span<const int32_t> history) const;

  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;  // scratch
};

// Log-probabilities of the full distribution softmax(logits): the chosen token's and the `top_n` most likely.
TokenLogprob LogprobOf(std::span<const float> logits, int32_t token);
std::vector<TokenLogprob> TopLogprobs(std::span<const float> logits, int top_n);

}  // namespace tq::engine
