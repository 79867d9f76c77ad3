// The engine's view of the GPU forward pass (gpu_model.h) with no CUDA type in it, so that the engine builds
// and links the same way with and without TQ_ENABLE_CUDA: without it, Backend::Create answers Unavailable.
//
// The engine keeps its scheduling (admission, continuous batching, preemption, sampling); a Backend runs each
// sequence's tokens of a step and keeps their KV pages in its page store, the engine's store on this path: the
// hot tier in device memory, the warm tier in pinned host memory, the cold tier on disk.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/gpu/model_options.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/page_store.h"
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
  // The page store every sequence's pages are in. The engine schedules against it (Fits), reports it (stats,
  // metrics, KV events) and may hold it past the Backend; it is used from the engine thread, as on the CPU.
  virtual std::shared_ptr<engine::KvPageStore> store() const = 0;
  // (layer, KV head) pairs of each precision class {HOT, ACTIVE, SPARSE}: when a sequence's newest 128 tokens
  // fill, each pair gets one page of its class.
  virtual std::array<uint64_t, 3> class_pairs() const = 0;
  virtual std::string Describe() const = 0;  // device, formats, pool size
};

// The K and V format names that `layout` gives every layer and head, or InvalidArgument saying why the GPU
// path cannot hold it (a plain f32 layer, formats that differ between layers, heads or precision classes).
StatusOr<std::pair<std::string, std::string>> UniformFormats(const engine::KvLayout& layout);

}  // namespace tq::gpu
