// The KV of one sequence, until the KV manager (engine/kv) takes over: f32 rows in RAM, in pages of
// kPageTokens positions allocated as the sequence grows (a sequence never reserves its whole context up front).
// Page layout: for each layer, K then V, each [kPageTokens, n_kv_heads, head_dim] f32, position-major.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "engine/llm/hparams.h"

namespace tq::engine {

class SequenceKv {
 public:
  static constexpr int kPageTokens = 128;

  SequenceKv(const HParams& hp, int n_ctx);

  int n_ctx() const { return n_ctx_; }
  int n_tokens() const { return n_tokens_; }   // positions [0, n_tokens) are filled
  void set_n_tokens(int n) { n_tokens_ = n; }  // after a forward pass

  // Makes positions [0, n) addressable. OutOfRange past n_ctx.
  Status Reserve(int n);
  // Frees pages past position n and forgets positions >= n.
  void Truncate(int n);

  // [n_kv_heads, head_dim] rows at `pos` (precondition: pos < reserved()).
  float* k(int layer, int pos) { return Row(layer, 0, pos); }
  float* v(int layer, int pos) { return Row(layer, 1, pos); }
  const float* k(int layer, int pos) const { return const_cast<SequenceKv*>(this)->Row(layer, 0, pos); }
  const float* v(int layer, int pos) const { return const_cast<SequenceKv*>(this)->Row(layer, 1, pos); }

  int reserved() const { return static_cast<int>(pages_.size()) * kPageTokens; }
  uint64_t bytes() const { return pages_.size() * page_floats_ * sizeof(float); }

 private:
  float* Row(int layer, int kv, int pos) {
    float* page = pages_[pos / kPageTokens].get();
    return page + ((static_cast<size_t>(layer) * 2 + kv) * kPageTokens + pos % kPageTokens) * row_;
  }

  int n_ctx_;
  int n_layers_;
  size_t row_;          // n_kv_heads * head_dim
  size_t page_floats_;  // n_layers * 2 * kPageTokens * row_
  int n_tokens_ = 0;
  std::vector<std::unique_ptr<float[]>> pages_;
};

}  // namespace tq::engine
