// Fixed-slot pools of KV page memory for the GPU path's tiers, built with or without CUDA.
//
// SlabMemory: where a slab's bytes live and how host bytes get in and out of them. HostMemory() (here) is plain
// host memory; DeviceMemory() and PinnedHostMemory() (device_pool.h, CUDA builds) are cudaMalloc and cudaHostAlloc.
// SlabPool: one allocation (slab) per slot size, cut into fixed slots, with a free list; the slabs of one pool
// share a byte budget. A slot holds one page (K bytes then V bytes) of one (sequence, layer, KV head).
// Threading: a pool is used by one thread; SlabMemory's copies may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tq::gpu {

// Slot strides are multiples of this (page pointers stay aligned for the kernels; adjacent slots stay adjacent in
// a staging set, so runs of them copy as one).
inline constexpr size_t kSlotAlign = 256;
inline size_t SlotStride(size_t bytes) { return (bytes + kSlotAlign - 1) / kSlotAlign * kSlotAlign; }

class SlabMemory {
 public:
  virtual ~SlabMemory() = default;
  virtual std::string_view name() const = 0;  // "device", "pinned host", "host"
  // Whether the CPU may read and write the bytes in place (host and pinned host memory; not device memory).
  virtual bool host_readable() const = 0;
  // `bytes` bytes aligned to kSlotAlign; ResourceExhausted when there is no room, Unavailable without a device.
  virtual StatusOr<uint8_t*> Allocate(size_t bytes) = 0;
  virtual void Release(uint8_t* bytes) = 0;
  // Synchronous copies between host memory and this memory (n bytes).
  virtual Status CopyIn(uint8_t* dst, const uint8_t* host_src, size_t n) = 0;
  virtual Status CopyOut(uint8_t* host_dst, const uint8_t* src, size_t n) = 0;
};

// Plain host memory (aligned_alloc): the pools' memory where there is no GPU, and in tests.
std::shared_ptr<SlabMemory> HostMemory();

class SlabPool {
 public:
  SlabPool() = default;
  SlabPool(std::shared_ptr<SlabMemory> memory, size_t budget_bytes)
      : memory_(std::move(memory)), budget_bytes_(budget_bytes) {}
  SlabPool(SlabPool&&) noexcept = default;
  SlabPool& operator=(SlabPool&&) noexcept = default;

  // Allocates the slab of `slots` slots of SlotStride(slot_bytes) bytes. ResourceExhausted when it would exceed the
  // budget (or the memory has no room); AlreadyExists when the pool has a slab of that stride.
  Status AddSlab(size_t slot_bytes, int64_t slots);
  // A free slot of the slab of SlotStride(slot_bytes); ResourceExhausted when the slab is full, NotFound without
  // such a slab. Slots of a fresh slab come out in address order.
  StatusOr<uint8_t*> Allocate(size_t slot_bytes);
  // Returns a slot from Allocate (null is ignored).
  void Free(uint8_t* slot);

  SlabMemory& memory() const { return *memory_; }
  size_t budget_bytes() const { return budget_bytes_; }
  size_t capacity_bytes() const;  // bytes of all slabs
  size_t used_bytes() const;      // bytes of allocated slots
  int64_t used_slots() const;

 private:
  struct ReleaseSlab {
    SlabMemory* memory;  // the pool's (SlabPool::memory_ outlives its slabs)
    void operator()(uint8_t* p) const { memory->Release(p); }
  };
  struct Slab {
    size_t stride = 0;
    int64_t slots = 0;
    std::unique_ptr<uint8_t, ReleaseSlab> bytes;
    std::vector<int64_t> free;  // free slot indices; back() is next
  };

  std::shared_ptr<SlabMemory> memory_;  // declared before slabs_: outlives them
  size_t budget_bytes_ = 0;
  std::vector<Slab> slabs_;
};

}  // namespace tq::gpu
