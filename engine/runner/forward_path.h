// Where a step's forward pass runs, as the scheduler sees it: the CPU (the model on the thread pool) or the GPU
// (gpu::Backend). On both the KV pages are in one page store, the engine's: RAM arenas and disk on the CPU, the
// backend's device, pinned and disk tiers on the GPU. The engine asks the path what KV tokens need (and the store
// whether that fits) and runs a batch; it does not branch on which path it has.
//
// Threading: the engine thread's.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/api.h"
#include "engine/gpu/backend.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/page_store.h"
#include "engine/llm/model.h"
#include "engine/llm/thread_pool.h"

namespace tq::engine {

// KV a step or an admission needs: pages per precision class {HOT, ACTIVE, SPARSE} of the page store.
struct KvNeed {
  std::array<uint64_t, 3> pages{};
  KvNeed& operator+=(const KvNeed& o);
};

// The KV a sequence holds on the path beside its SequenceKv: the GPU's, made at its first forward pass; null on
// the CPU (where the SequenceKv holds everything).
using PathKv = std::unique_ptr<gpu::BackendKv>;

class ForwardPath {
 public:
  virtual ~ForwardPath() = default;
  virtual bool on_gpu() const = 0;
  // Unimplemented for what the path cannot run yet (embeddings and LoRA adapters on the GPU).
  virtual Status Supports(bool embed, bool lora) const = 0;
  // KV for tokens [have, have + n) of one sequence, run in passes of at most max_pass tokens.
  virtual KvNeed Need(int have, int n, int max_pass) const = 0;
  // One forward pass over the batch. kvs[i] is the path KV of batch[i]'s sequence (tokens of one sequence are
  // consecutive and share it). logits: the rows of the tokens that want them, in batch order; hidden: likewise.
  virtual Status Forward(const std::vector<BatchToken>& batch, const std::vector<PathKv*>& kvs,
                         std::vector<float>* logits, std::vector<float>* hidden) = 0;
};

// `layout` is the engine's current layout, read at each call (online adaptation replaces it between steps).
std::unique_ptr<ForwardPath> MakeCpuPath(const Model& model, ThreadPool& pool,
                                         const std::shared_ptr<const KvLayout>& layout);
// The store is backend->store(), which the engine holds as its own.
std::unique_ptr<ForwardPath> MakeGpuPath(std::unique_ptr<gpu::Backend> backend);

}  // namespace tq::engine
