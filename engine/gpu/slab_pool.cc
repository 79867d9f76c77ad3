#include "engine/gpu/slab_pool.h"

#include <cstdlib>
#include <cstring>
#include <string>

namespace tq::gpu {

namespace {

class PlainHostMemory final : public SlabMemory {
 public:
  std::string_view name() const override { return "host"; }
  bool host_readable() const override { return true; }
  StatusOr<uint8_t*> Allocate(size_t bytes) override {
    void* p = std::aligned_alloc(kSlotAlign, SlotStride(bytes));
    if (p == nullptr) return ResourceExhaustedError("host memory: " + std::to_string(bytes) + " B not available");
    return static_cast<uint8_t*>(p);
  }
  void Release(uint8_t* bytes) override { std::free(bytes); }
  Status CopyIn(uint8_t* dst, const uint8_t* host_src, size_t n) override {
    std::memcpy(dst, host_src, n);
    return Status::Ok();
  }
  Status CopyOut(uint8_t* host_dst, const uint8_t* src, size_t n) override {
    std::memcpy(host_dst, src, n);
    return Status::Ok();
  }
};

}  // namespace

std::shared_ptr<SlabMemory> HostMemory() { return std::make_shared<PlainHostMemory>(); }

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
  TQ_ASSIGN_OR_RETURN(uint8_t* base, memory_->Allocate(bytes));
  slab.bytes = std::unique_ptr<uint8_t, ReleaseSlab>(base, ReleaseSlab{memory_.get()});
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
    return s.bytes.get() + static_cast<size_t>(i) * s.stride;
  }
  return NotFoundError("SlabPool: no slab of " + std::to_string(stride) + " B slots");
}

void SlabPool::Free(uint8_t* slot) {
  if (slot == nullptr) return;
  for (Slab& s : slabs_) {
    uint8_t* base = s.bytes.get();
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

}  // namespace tq::gpu
