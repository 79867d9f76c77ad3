#include "engine/gpu/device_pool.h"

#include <algorithm>
#include <string>

namespace tq::gpu {

uint8_t* SlabPool::Slab::base() const {
  return static_cast<uint8_t*>(device.get() != nullptr ? device.get() : host.get());
}

Status SlabPool::AddSlab(size_t slot_bytes, int64_t slots) {
  if (slot_bytes == 0 || slots <= 0) return InvalidArgumentError("SlabPool: a slab needs slots of some bytes");
  const size_t stride = SlotStride(slot_bytes);
  for (const Slab& s : slabs_) {
    if (s.stride == stride) return AlreadyExistsError("SlabPool: a slab of " + std::to_string(stride) + " B slots");
  }
  const size_t bytes = stride * static_cast<size_t>(slots);
  if (capacity_bytes() + bytes > budget_bytes_) {
    return ResourceExhaustedError("SlabPool: " + std::to_string(slots) + " slots of " + std::to_string(stride) +
                                  " B exceed the budget of " + std::to_string(budget_bytes_) + " B");
  }
  Slab slab;
  slab.stride = stride;
  slab.slots = slots;
  if (memory_ == PoolMemory::kDevice) {
    TQ_ASSIGN_OR_RETURN(slab.device, DeviceBuffer::Allocate(bytes));
  } else {
    TQ_ASSIGN_OR_RETURN(slab.host, PinnedBuffer::Allocate(bytes));
  }
  slab.free.reserve(slots);
  for (int64_t i = slots - 1; i >= 0; --i) slab.free.push_back(i);  // back() = slot 0
  slabs_.push_back(std::move(slab));
  return Status::Ok();
}

StatusOr<uint8_t*> SlabPool::Allocate(size_t slot_bytes) {
  const size_t stride = SlotStride(slot_bytes);
  for (Slab& s : slabs_) {
    if (s.stride != stride) continue;
    if (s.free.empty()) {
      return ResourceExhaustedError("SlabPool: all " + std::to_string(s.slots) + " slots of " +
                                    std::to_string(stride) + " B are in use");
    }
    const int64_t i = s.free.back();
    s.free.pop_back();
    return s.base() + static_cast<size_t>(i) * s.stride;
  }
  return NotFoundError("SlabPool: no slab of " + std::to_string(stride) + " B slots");
}

void SlabPool::Free(uint8_t* slot) {
  if (slot == nullptr) return;
  for (Slab& s : slabs_) {
    uint8_t* base = s.base();
    if (slot >= base && slot < base + s.stride * static_cast<size_t>(s.slots)) {
      s.free.push_back((slot - base) / static_cast<ptrdiff_t>(s.stride));
      return;
    }
  }
}

size_t SlabPool::capacity_bytes() const {
  size_t n = 0;
  for (const Slab& s : slabs_) n += s.stride * static_cast<size_t>(s.slots);
  return n;
}

size_t SlabPool::used_bytes() const {
  size_t n = 0;
  for (const Slab& s : slabs_) n += s.stride * static_cast<size_t>(s.slots - static_cast<int64_t>(s.free.size()));
  return n;
}

int64_t SlabPool::used_slots() const {
  int64_t n = 0;
  for (const Slab& s : slabs_) n += s.slots - static_cast<int64_t>(s.free.size());
  return n;
}

StatusOr<WarmTier> WarmTier::Create(size_t host_budget, size_t staging_bytes) {
  WarmTier t;
  t.host_ = SlabPool(PoolMemory::kPinnedHost, host_budget);
  for (int s = 0; s < 2; ++s) {
    TQ_ASSIGN_OR_RETURN(t.staging_[s], DeviceBuffer::Allocate(std::max<size_t>(staging_bytes, kSlotAlign)));
    TQ_ASSIGN_OR_RETURN(t.staged_[s], Event::Create());
    TQ_ASSIGN_OR_RETURN(t.consumed_[s], Event::Create());
  }
  TQ_ASSIGN_OR_RETURN(t.copy_, Stream::Create());
  return t;
}

Status WarmTier::BeginPass(cudaStream_t compute) {
  for (int s = 0; s < 2; ++s) TQ_RETURN_IF_ERROR(Release(s, compute));
  return Status::Ok();
}

Status WarmTier::StageAsync(int set, std::span<StagedPage> pages, size_t stride) {
  if (set < 0 || set > 1) return InvalidArgumentError("WarmTier: staging set must be 0 or 1");
  if (stride % kSlotAlign != 0) return InvalidArgumentError("WarmTier: stride is not a slot stride");
  if (stride * pages.size() > staging_[set].bytes()) {
    return ResourceExhaustedError("WarmTier: " + std::to_string(pages.size()) + " pages exceed the staging set");
  }
  cudaStream_t copy = copy_.get();
  TQ_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy, consumed_[set].get(), 0));
  uint8_t* dst = staging_[set].as<uint8_t>();
  // Pages land back to back; a run whose host slots are adjacent too is one copy.
  size_t i = 0;
  while (i < pages.size()) {
    size_t j = i + 1;
    while (j < pages.size() && pages[j].host == pages[j - 1].host + stride) ++j;
    TQ_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst + i * stride, pages[i].host, (j - i) * stride, cudaMemcpyHostToDevice, copy));
    for (size_t k = i; k < j; ++k) pages[k].device = dst + k * stride;
    i = j;
  }
  TQ_CUDA_RETURN_IF_ERROR(cudaEventRecord(staged_[set].get(), copy));
  return Status::Ok();
}

Status WarmTier::SyncStaged(int set) {
  TQ_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(staged_[set].get()));
  return Status::Ok();
}

Status WarmTier::WaitStaged(int set, cudaStream_t compute) {
  TQ_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(compute, staged_[set].get(), 0));
  return Status::Ok();
}

Status WarmTier::Release(int set, cudaStream_t compute) {
  TQ_CUDA_RETURN_IF_ERROR(cudaEventRecord(consumed_[set].get(), compute));
  return Status::Ok();
}

}  // namespace tq::gpu
