// KV page memory on the GPU side: the hot tier (device memory) and the warm tier (pinned host memory staged into
// device memory for attention).
//
// SlabPool: one allocation (slab) per slot size, cut into fixed slots, with a free list; the slabs of one pool
// share a byte budget. A slot holds one page pair (K then V bytes) of one (sequence, layer, KV head).
// WarmTier: a pinned host SlabPool plus two device staging sets; the pages one layer's attention reads are copied
// into a staging set on the tier's own copy stream while the compute stream runs the previous layer, and the
// compute stream waits on the set's event before attention.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "kernels/cuda/runtime.h"

namespace tq::gpu {

// Slot strides are multiples of this (page pointers stay aligned for the kernels; adjacent slots stay adjacent in
// a staging set, so runs of them copy as one).
inline constexpr size_t kSlotAlign = 256;
inline size_t SlotStride(size_t bytes) { return (bytes + kSlotAlign - 1) / kSlotAlign * kSlotAlign; }

enum class PoolMemory { kDevice, kPinnedHost };

class SlabPool {
 public:
  SlabPool(PoolMemory memory, size_t budget_bytes) : memory_(memory), budget_bytes_(budget_bytes) {}
  SlabPool(SlabPool&&) noexcept = default;
  SlabPool& operator=(SlabPool&&) noexcept = default;

  // Allocates the slab of `slots` slots of SlotStride(slot_bytes) bytes. ResourceExhausted when it would exceed the
  // budget (or the device has no room); AlreadyExists when the pool has a slab of that stride.
  Status AddSlab(size_t slot_bytes, int64_t slots);
  // A free slot of the slab of SlotStride(slot_bytes); ResourceExhausted when the slab is full, NotFound without
  // such a slab. Slots of a fresh slab come out in address order.
  StatusOr<uint8_t*> Allocate(size_t slot_bytes);
  // Returns a slot from Allocate (null is ignored).
  void Free(uint8_t* slot);

  PoolMemory memory() const { return memory_; }
  size_t budget_bytes() const { return budget_bytes_; }
  size_t capacity_bytes() const;  // bytes of all slabs
  size_t used_bytes() const;      // bytes of allocated slots
  int64_t used_slots() const;

 private:
  struct Slab {
    size_t stride = 0;
    int64_t slots = 0;
    DeviceBuffer device;            // kDevice
    PinnedBuffer host;              // kPinnedHost
    std::vector<int64_t> free;      // free slot indices; back() is next
    uint8_t* base() const;
  };

  PoolMemory memory_;
  size_t budget_bytes_;
  std::vector<Slab> slabs_;
};

// One host page slot to stage and where it landed.
struct StagedPage {
  const uint8_t* host = nullptr;  // a slot of the warm pool
  uint8_t* device = nullptr;      // set by StageAsync: its copy in the staging set
};

class WarmTier {
 public:
  // host_budget: bytes of pinned slabs; staging_bytes: device bytes of each of the two staging sets.
  static StatusOr<WarmTier> Create(size_t host_budget, size_t staging_bytes);
  WarmTier(WarmTier&&) noexcept = default;
  WarmTier& operator=(WarmTier&&) noexcept = default;

  SlabPool& host() { return host_; }
  const SlabPool& host() const { return host_; }
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
  WarmTier() : host_(PoolMemory::kPinnedHost, 0) {}

  SlabPool host_;
  DeviceBuffer staging_[2];
  Stream copy_;
  Event staged_[2];    // copies into the set done
  Event consumed_[2];  // last reader of the set done
};

}  // namespace tq::gpu
