#include "engine/llm/kv_cache.h"

namespace tq::engine {

SequenceKv::SequenceKv(const HParams& hp, int n_ctx)
    : n_ctx_(n_ctx),
      row_(static_cast<size_t>(hp.n_kv_heads) * hp.head_dim),
      data_(static_cast<size_t>(hp.n_layers) * 2 * n_ctx * row_) {}

}  // namespace tq::engine
