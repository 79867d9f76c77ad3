// GPU memory for KV pages: device memory (HBM) and pinned host memory for the slot pools (slab_pool.h) that
// are the hot and warm tiers of the page store (slab_page_tier.h), and the staging that brings host pages to the
// device for attention.
//
// WarmTier: two device staging sets and a copy stream; the pinned (and cold, read into pinned buffers) pages one
// layer's attention reads are copied into a staging set on the copy stream while the compute stream runs the
// previous layer, and the compute stream waits on the set's event before attention.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/gpu/slab_pool.h"
#include "kernels/cuda/runtime.h"

namespace tq::gpu {

// cudaMalloc'd device memory (HBM) and cudaHostAlloc'd pinned host memory for SlabPools. Unavailable (at
// Allocate) without a GPU.
std::shared_ptr<SlabMemory> DeviceMemory();
std::shared_ptr<SlabMemory> PinnedHostMemory();

// One host page slot to stage and where it landed.
struct StagedPage {
  const uint8_t* host = nullptr;  // pinned host memory: a warm page's slot, or a cold page's read buffer
  uint8_t* device = nullptr;      // set by StageAsync: its copy in the staging set
};

class WarmTier {
 public:
  // staging_bytes: device bytes of each of the two staging sets.
  static StatusOr<WarmTier> Create(size_t staging_bytes);
  WarmTier(WarmTier&&) noexcept = default;
  WarmTier& operator=(WarmTier&&) noexcept = default;

  cudaStream_t copy_stream() const { return copy_.get(); }

  // Marks everything enqueued on `compute` so far as the last reader of both staging sets (call once before the
  // first StageAsync of a pass).
  Status BeginPass(cudaStream_t compute);
  // Copies pages (each `stride` bytes, a warm slot stride) into staging set `set` (0 or 1) on the copy stream,
  // after the compute stream's last reader of that set (Release) finished; records the set's staged event. Fills
  // each page's `device`. Host-adjacent runs copy as one cudaMemcpyAsync. ResourceExhausted when the set is too
  // small (nothing is copied).
  Status StageAsync(int set, std::span<StagedPage> pages, size_t stride);
  // The host waits until the set's last StageAsync copies finished (their host pages may be reused).
  Status SyncStaged(int set);
  // The compute stream waits for the set's copies (cudaStreamWaitEvent) before reading it.
  Status WaitStaged(int set, cudaStream_t compute);
  // Everything enqueued on `compute` so far is the set's last reader: the next StageAsync into it waits for it.
  Status Release(int set, cudaStream_t compute);

 private:
  WarmTier() = default;

  DeviceBuffer staging_[2];
  Stream copy_;
  Event staged_[2];    // copies into the set done
  Event consumed_[2];  // last reader of the set done
};

}  // namespace tq::gpu
