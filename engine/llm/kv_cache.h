// The KV of one sequence, until the KV manager (engine/kv) takes over: plain f32 rows in RAM.
// Layout per layer: K and V each [n_ctx, n_kv_heads, head_dim] f32, position-major.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/llm/hparams.h"

namespace tq::engine {

class SequenceKv {
 public:
  SequenceKv(const HParams& hp, int n_ctx);

  int n_ctx() const { return n_ctx_; }
  int n_tokens() const { return n_tokens_; }   // positions [0, n_tokens) are filled
  void set_n_tokens(int n) { n_tokens_ = n; }  // after a forward pass; also truncates (prefix reuse)

  // [n_kv_heads, head_dim] rows at `pos`.
  float* k(int layer, int pos) { return data_.data() + Offset(layer, 0, pos); }
  float* v(int layer, int pos) { return data_.data() + Offset(layer, 1, pos); }
  const float* k(int layer, int pos) const { return data_.data() + Offset(layer, 0, pos); }
  const float* v(int layer, int pos) const { return data_.data() + Offset(layer, 1, pos); }

  uint64_t bytes() const { return data_.size() * sizeof(float); }

 private:
  size_t Offset(int layer, int kv, int pos) const {
    return ((static_cast<size_t>(layer) * 2 + kv) * n_ctx_ + pos) * row_;
  }

  int n_ctx_;
  size_t row_;  // n_kv_heads * head_dim
  int n_tokens_ = 0;
  std::vector<float> data_;
};

}  // namespace tq::engine
