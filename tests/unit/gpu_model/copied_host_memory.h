// Host memory that the CPU is told not to read in place, so tiers over it return pages through CopyOut as they do
// from device memory: the device side of a GPU tier, on machines without a GPU (the real device and pinned memories
// run in gpu_model_test where there is one).
#pragma once

#include <memory>

#include "engine/gpu/slab_pool.h"

namespace tq::gpu::testing {

class CopiedHostMemory final : public SlabMemory {
 public:
  std::string_view name() const override { return "copied host"; }
  bool host_readable() const override { return false; }
  StatusOr<uint8_t*> Allocate(size_t bytes) override { return host_->Allocate(bytes); }
  void Release(uint8_t* bytes) override { host_->Release(bytes); }
  Status CopyIn(uint8_t* dst, const uint8_t* src, size_t n) override { return host_->CopyIn(dst, src, n); }
  Status CopyOut(uint8_t* dst, const uint8_t* src, size_t n) override { return host_->CopyOut(dst, src, n); }

 private:
  std::shared_ptr<SlabMemory> host_ = HostMemory();
};

}  // namespace tq::gpu::testing
