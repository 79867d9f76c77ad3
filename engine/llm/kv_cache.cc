#include "engine/llm/kv_cache.h"

#include <string>

namespace tq::engine {

SequenceKv::SequenceKv(const HParams& hp, int n_ctx)
    : n_ctx_(n_ctx),
      n_layers_(hp.n_layers),
      row_(static_cast<size_t>(hp.n_kv_heads) * hp.head_dim),
      page_floats_(static_cast<size_t>(hp.n_layers) * 2 * kPageTokens * row_) {}

Status SequenceKv::Reserve(int n) {
  if (n > n_ctx_) {
    return OutOfRangeError("sequence needs " + std::to_string(n) + " positions, its context is " +
                           std::to_string(n_ctx_));
  }
  while (reserved() < n) pages_.emplace_back(new float[page_floats_]);
  return Status::Ok();
}

void SequenceKv::Truncate(int n) {
  const size_t keep = (static_cast<size_t>(n) + kPageTokens - 1) / kPageTokens;
  if (pages_.size() > keep) pages_.resize(keep);
  if (n_tokens_ > n) n_tokens_ = n;
}

}  // namespace tq::engine
