// The engine's view of the GPU forward pass (gpu_model.h) with no CUDA type in it, so that the engine builds
// and links the same way with and without TQ_ENABLE_CUDA: without it, Backend::Create answers Unavailable.
//
// The engine keeps its scheduling (admission, continuous batching, preemption, sampling); a Backend runs each
// sequence's tokens of a step and holds their KV in the device pool (hot), pinned host memory (warm) and on
// disk (cold).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/gpu/model_options.h"
#include "engine/kv/kv_cache.h"
#include "engine/llm/model.h"

namespace tq::gpu {

// The KV of one sequence on the GPU. Destroyed before its Backend; its pages return to the pools.
class BackendKv {
 public:
  virtual ~BackendKv() = default;
  virtual uint64_t bytes() const = 0;  // device and pinned bytes it holds
};

class Backend {
 public:
  // Uploads the weights of `model` and sets up the pools. Unavailable without CUDA in the build or without a
  // device; InvalidArgument / Unimplemented for formats or models the GPU path does not take.
  static StatusOr<std::unique_ptr<Backend>> Create(const engine::Model& model,
                                                   const GpuModelOptions& options);
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
