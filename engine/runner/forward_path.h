// Where a step's forward pass runs and its KV lives, as the scheduler sees it: the CPU (the model on the thread
// pool, KV in the page store's tiers) or the GPU (gpu::Backend, KV in its device and pinned pools). The engine
// asks what KV tokens need, whether it fits and runs a batch; it does not branch on which path it has.
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

// KV a step or an admission needs: pages per precision class of the CPU's page store, or full pages per
// (layer, KV head) of the GPU's pools.
struct KvNeed {
  std::array<uint64_t, 3> pages{};
  uint64_t gpu_pages = 0;
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
  virtual bool Fits(const KvNeed& need) const = 0;
  // Why `need` does not fit, for a request that can never run: "12 pages) does not fit the KV tier budgets (...)".
  virtual std::string NoRoom(const KvNeed& need) const = 0;
  // One forward pass over the batch. kvs[i] is the path KV of batch[i]'s sequence (tokens of one sequence are
  // consecutive and share it). logits: the rows of the tokens that want them, in batch order; hidden: likewise.
  virtual Status Forward(const std::vector<BatchToken>& batch, const std::vector<PathKv*>& kvs,
                         std::vector<float>* logits, std::vector<float>* hidden) = 0;
  // The path's own gauges (the GPU pools' bytes).
  virtual void AddStats(EngineStats* stats) const = 0;
};

// `layout` is the engine's current layout, read at each call (online adaptation replaces it between steps).
std::unique_ptr<ForwardPath> MakeCpuPath(const Model& model, ThreadPool& pool, const KvPageStore& store,
                                         const std::shared_ptr<const KvLayout>& layout);
std::unique_ptr<ForwardPath> MakeGpuPath(std::unique_ptr<gpu::Backend> backend);

}  // namespace tq::engine
