// The engine's view of the GPU forward pass (gpu_model.h) with no CUDA type in it, so that the engine builds
// and links the same way with and without TQ_ENABLE_CUDA: without it, Backend::Create answers Unavailable.
//
// The engine keeps its scheduling (admission, continuous batching, preemption, sampling); a Backend runs each
// sequence's tokens of a step and holds their KV in the device pool (hot) and pinned host memory (warm).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/llm/kv_cache.h"
#include "engine/llm/model.h"
#include "storage/cold_store.h"

namespace tq::gpu {

struct BackendOptions {
  std::string k_format = "f16";  // one K and one V format (kernels/formats names) for every layer and head
  std::string v_format = "f16";
  int max_tokens = 0;   // tokens of one sequence at most (the context)
  int pool_tokens = 0;  // tokens per (layer, KV head) the pools hold across sequences; 0 = max_tokens
  double warm_heads_fraction = 0;  // of the (layer, KV head) pairs, kept in pinned host memory
  double cold_heads_fraction =
      0;  // of the pairs, kept on disk in cold.cold_dir (read per layer into pinned memory)
  storage::ColdStoreOptions cold;  // max_page_bytes is set by the backend
};

// The KV of one sequence on the GPU. Destroyed before its Backend; its pages return to the pools.
class BackendKv {
 public:
  virtual ~BackendKv() = default;
  virtual int n_tokens() const = 0;    // positions [0, n_tokens) hold KV
  virtual uint64_t bytes() const = 0;  // device and pinned bytes it holds
};

class Backend {
 public:
  // Uploads the weights of `model` and sets up the pools. Unavailable without CUDA in the build or without a
  // device; InvalidArgument / Unimplemented for formats or models the GPU path does not take.
  static StatusOr<std::unique_ptr<Backend>> Create(const engine::Model& model, const BackendOptions& options);
  virtual ~Backend() = default;

  virtual StatusOr<std::unique_ptr<BackendKv>> NewKv() = 0;
  // Runs tokens at positions [first_pos, first_pos + size) of `kv` (first_pos == kv.n_tokens()) and appends
  // their KV; with want_logits, `logits` gets the vocab_size logits of the last one. A Backend runs one call
  // at a time (the engine thread's).
  virtual Status Forward(BackendKv& kv, std::span<const int32_t> tokens, int first_pos, bool want_logits,
                         std::vector<float>* logits) = 0;
  // Full pages per (layer, KV head) the pools can still take (a sequence gets one per pair each time its
  // newest 128 tokens fill).
  virtual int64_t free_pages() const = 0;
  virtual uint64_t capacity_bytes() const = 0;  // page slots of the pools (device and pinned)
  virtual uint64_t used_bytes() const = 0;
  virtual std::string Describe() const = 0;  // device, formats, pool size
};

// The K and V format names that `layout` gives every layer and head, or InvalidArgument saying why the GPU
// path cannot hold it (a plain f32 layer, formats that differ between layers, heads or precision classes).
StatusOr<std::pair<std::string, std::string>> UniformFormats(const engine::KvLayout& layout);

}  // namespace tq::gpu
