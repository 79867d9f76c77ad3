// Options of the GPU forward pass (gpu_model.h), in a header without CUDA types so that the engine's backend
// (backend.h) takes them as they are.
#pragma once

#include <string>

#include "common/status.h"
#include "storage/cold_store.h"

namespace tq::gpu {

struct GpuModelOptions {
  std::string k_format = "f16";  // kernels/formats names; one K and one V format for every layer and head
  std::string v_format = "f16";
  // KV tokens of one sequence at most (the staging sets of the warm tier hold this many per layer).
  int max_tokens = 33 * 1024;
  // Tokens per (layer, KV head) the pools hold across all sequences, rounded up to pages; 0 = max_tokens.
  int pool_tokens = 0;
  // Fraction of the (layer, KV head) pairs whose full pages live in the warm tier (spread evenly), in [0, 1].
  double warm_heads_fraction = 0.0;
  // Fraction of the pairs whose full pages live on disk (spread evenly; a pair both fractions pick is cold),
  // in [0, 1]; needs cold.cold_dir. Of `cold`, the directory, capacity_bytes, direct_io and io are used (the
  // page store's cold tier, engine/kv/cold_page_tier.h).
  double cold_heads_fraction = 0.0;
  storage::ColdStoreOptions cold;
  // Record events around each layer's attention call (GpuModel::last_attention_ms()).
  bool time_attention = false;
};

// InvalidArgument for options no GPU could take (checked before any device is looked for).
inline Status CheckGpuModelOptions(const GpuModelOptions& o) {
  if (o.max_tokens <= 0) return InvalidArgumentError("GPU path: max_tokens must be positive");
  if (o.pool_tokens < 0) return InvalidArgumentError("GPU path: pool_tokens must be >= 0");
  if (!(o.warm_heads_fraction >= 0.0 && o.warm_heads_fraction <= 1.0)) {
    return InvalidArgumentError("GPU path: the warm heads fraction must be in [0, 1]");
  }
  if (!(o.cold_heads_fraction >= 0.0 && o.cold_heads_fraction <= 1.0)) {
    return InvalidArgumentError("GPU path: the cold heads fraction must be in [0, 1]");
  }
  if (o.cold_heads_fraction > 0 && o.cold.cold_dir.empty()) {
    return InvalidArgumentError("GPU path: cold heads need a cold directory (kv.cold_dir)");
  }
  return Status::Ok();
}

}  // namespace tq::gpu
