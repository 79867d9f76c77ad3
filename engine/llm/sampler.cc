#include "engine/llm/sampler.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>

namespace tq::engine {
namespace {

Status Range(const char* name, double v, double lo, double hi, bool lo_open = false) {
  if (std::isnan(v) || v > hi || v < lo || (lo_open && v == lo)) {
    return InvalidArgumentError(std::string(name) + " = " + std::to_string(v) + " is outside " +
                                (lo_open ? "(" : "[") + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return Status::Ok();
}

double LogSumExp(std::span<const float> logits) {
  const float m = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - m);
  return m + std::log(sum);
}

}  // namespace

Status ValidateSamplingParams(const SamplingParams& p) {
  TQ_RETURN_IF_ERROR(Range("temperature", p.temperature, 0, 100));
  TQ_RETURN_IF_ERROR(Range("top_k", p.top_k, 0, 1e9));
  TQ_RETURN_IF_ERROR(Range("top_p", p.top_p, 0, 1, /*lo_open=*/true));
  TQ_RETURN_IF_ERROR(Range("min_p", p.min_p, 0, 1));
  TQ_RETURN_IF_ERROR(Range("repetition_penalty", p.repetition_penalty, 0, 10, /*lo_open=*/true));
  TQ_RETURN_IF_ERROR(Range("frequency_penalty", p.frequency_penalty, -2, 2));
  TQ_RETURN_IF_ERROR(Range("presence_penalty", p.presence_penalty, -2, 2));
  TQ_RETURN_IF_ERROR(Range("penalty_window", p.penalty_window, 0, 1e9));
  for (const auto& [token, bias] : p.logit_bias) {
    if (token < 0) return InvalidArgumentError("logit_bias: token id " + std::to_string(token) + " is negative");
    TQ_RETURN_IF_ERROR(Range("logit_bias", bias, -100, 100));
  }
  return Status::Ok();
}

Sampler::Sampler(const SamplingParams& params)
    : p_(params), rng_(params.has_seed ? params.seed : std::random_device{}()) {}

void Sampler::ApplyPenalties(std::span<float> logits, std::span<const int32_t> history) const {
  for (const auto& [token, bias] : p_.logit_bias) {
    if (token >= 0 && static_cast<size_t>(token) < logits.size()) logits[token] += bias;
  }
  if (p_.repetition_penalty == 1.0f && p_.frequency_penalty == 0.0f && p_.presence_penalty == 0.0f) return;
  const size_t n = std::min(history.size(), static_cast<size_t>(p_.penalty_window));
  std::unordered_map<int32_t, int> counts;
  for (size_t i = history.size() - n; i < history.size(); ++i) ++counts[history[i]];
  for (const auto& [token, count] : counts) {
    if (token < 0 || static_cast<size_t>(token) >= logits.size()) continue;
    float& l = logits[token];
    l = l > 0 ? l / p_.repetition_penalty : l * p_.repetition_penalty;
    l -= p_.frequency_penalty * count + p_.presence_penalty;
  }
}

int32_t Sampler::Sample(std::span<float> logits, std::span<const int32_t> history) {
  ApplyPenalties(logits, history);
  if (p_.temperature == 0.0f || p_.top_k == 1) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  candidates_.clear();
  candidates_.reserve(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) candidates_.emplace_back(logits[i], static_cast<int32_t>(i));
  size_t keep = candidates_.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < keep) {
    keep = p_.top_k;
    std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(),
                      [](const auto& a, const auto& b) { return a.first > b.first; });
  } else {
    std::sort(candidates_.begin(), candidates_.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  }
  candidates_.resize(keep);
  // Probabilities at the temperature, in place of the logits (sorted descending).
  const float top = candidates_[0].first;
  double sum = 0;
  for (auto& c : candidates_) {
    c.first = std::exp((c.first - top) / p_.temperature);
    sum += c.first;
  }
  // top-p: the smallest prefix whose mass reaches top_p; min-p: drop tokens under min_p * p(top).
  double mass = 0;
  size_t cut = candidates_.size();
  for (size_t i = 0; i < candidates_.size(); ++i) {
    mass += candidates_[i].first / sum;
    if (candidates_[i].first < p_.min_p * candidates_[0].first) {
      cut = std::max<size_t>(1, i);
      break;
    }
    if (mass >= p_.top_p) {
      cut = i + 1;
      break;
    }
  }
  candidates_.resize(cut);
  double kept = 0;
  for (const auto& c : candidates_) kept += c.first;
  double r = std::uniform_real_distribution<double>(0.0, kept)(rng_);
  for (const auto& c : candidates_) {
    r -= c.first;
    if (r <= 0) return c.second;
  }
  return candidates_.back().second;
}

TokenLogprob LogprobOf(std::span<const float> logits, int32_t token) {
  return {token, static_cast<float>(logits[token] - LogSumExp(logits))};
}

std::vector<TokenLogprob> TopLogprobs(std::span<const float> logits, int top_n) {
  const double lse = LogSumExp(logits);
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  const size_t n = std::min(ids.size(), static_cast<size_t>(std::max(top_n, 0)));
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  std::vector<TokenLogprob> out;
  for (size_t i = 0; i < n; ++i) out.push_back({ids[i], static_cast<float>(logits[ids[i]] - lse)});
  return out;
}

}  // namespace tq::engine
