#include "engine/gpu/device_pool.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <unordered_map>

namespace tq::gpu {

namespace {

// Device (cudaMalloc) or pinned host (cudaHostAlloc) memory; each allocation an owned CudaBuffer.
template <BufferMemory kMemory>
class CudaSlabMemory final : public SlabMemory {
 public:
  std::string_view name() const override { return kMemory == BufferMemory::kDevice ? "device" : "pinned host"; }
  bool host_readable() const override { return kMemory == BufferMemory::kPinned; }
  StatusOr<uint8_t*> Allocate(size_t bytes) override {
    TQ_ASSIGN_OR_RETURN(CudaBuffer<kMemory> buf, CudaBuffer<kMemory>::Allocate(bytes));
    uint8_t* p = buf.template as<uint8_t>();
    std::lock_guard<std::mutex> lock(mu_);
    buffers_.emplace(p, std::move(buf));
    return p;
  }
  void Release(uint8_t* bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    buffers_.erase(bytes);
  }
  Status CopyIn(uint8_t* dst, const uint8_t* host_src, size_t n) override {
    TQ_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, host_src, n, cudaMemcpyDefault));
    return Status::Ok();
  }
  Status CopyOut(uint8_t* host_dst, const uint8_t* src, size_t n) override {
    TQ_CUDA_RETURN_IF_ERROR(cudaMemcpy(host_dst, src, n, cudaMemcpyDefault));
    return Status::Ok();
  }

 private:
  std::mutex mu_;
  std::unordered_map<uint8_t*, CudaBuffer<kMemory>> buffers_;
};

}  // namespace

std::shared_ptr<SlabMemory> DeviceMemory() { return std::make_shared<CudaSlabMemory<BufferMemory::kDevice>>(); }
std::shared_ptr<SlabMemory> PinnedHostMemory() { return std::make_shared<CudaSlabMemory<BufferMemory::kPinned>>(); }

StatusOr<WarmTier> WarmTier::Create(size_t staging_bytes) {
  WarmTier t;
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
