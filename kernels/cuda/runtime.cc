#include "kernels/cuda/runtime.h"

namespace tq::gpu {

Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  std::string message = std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemNotReady:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
      return UnavailableError(std::move(message));
    case cudaErrorMemoryAllocation:
      return ResourceExhaustedError(std::move(message));
    default:
      return InternalError(std::move(message));
  }
}

StatusOr<DeviceInfo> ProbeDevice() {
  DeviceInfo info;
  cudaError_t err = cudaGetDeviceCount(&info.count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear it
    return UnavailableError(std::string("no CUDA device: ") + cudaGetErrorString(err));
  }
  if (info.count == 0) return UnavailableError("no CUDA device: the driver sees none");
  TQ_CUDA_RETURN_IF_ERROR(cudaGetDevice(&info.device));
  cudaDeviceProp prop;
  TQ_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, info.device));
  info.name = prop.name;
  info.sm_major = prop.major;
  info.sm_minor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  TQ_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
  TQ_CUDA_RETURN_IF_ERROR(cudaDriverGetVersion(&info.driver_version));
  TQ_CUDA_RETURN_IF_ERROR(cudaRuntimeGetVersion(&info.runtime_version));
  return info;
}

namespace {

cudaError_t Free(BufferMemory memory, void* p) { return memory == BufferMemory::kDevice ? cudaFree(p) : cudaFreeHost(p); }

}  // namespace

template <BufferMemory kMemory>
StatusOr<CudaBuffer<kMemory>> CudaBuffer<kMemory>::Allocate(size_t bytes) {
  CudaBuffer b;
  TQ_RETURN_IF_ERROR(b.Reserve(bytes));
  return b;
}

template <BufferMemory kMemory>
CudaBuffer<kMemory>& CudaBuffer<kMemory>::operator=(CudaBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_ != nullptr) Free(kMemory, ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

template <BufferMemory kMemory>
CudaBuffer<kMemory>::~CudaBuffer() {
  if (ptr_ != nullptr) Free(kMemory, ptr_);
}

template <BufferMemory kMemory>
Status CudaBuffer<kMemory>::Reserve(size_t bytes) {
  if (bytes <= bytes_ && ptr_ != nullptr) return Status::Ok();
  if (ptr_ != nullptr) Free(kMemory, ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
  const size_t n = bytes == 0 ? 1 : bytes;
  if constexpr (kMemory == BufferMemory::kDevice) {
    TQ_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr_, n));
  } else {
    TQ_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&ptr_, n, cudaHostAllocPortable));
  }
  bytes_ = bytes;
  return Status::Ok();
}

template class CudaBuffer<BufferMemory::kDevice>;
template class CudaBuffer<BufferMemory::kPinned>;

StatusOr<Stream> Stream::Create() {
  Stream s;
  TQ_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s.s_, cudaStreamNonBlocking));
  return s;
}

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (s_ != nullptr) cudaStreamDestroy(s_);
    s_ = std::exchange(o.s_, nullptr);
  }
  return *this;
}

Stream::~Stream() {
  if (s_ != nullptr) cudaStreamDestroy(s_);
}

Status Stream::Synchronize() const { return CudaStatus(cudaStreamSynchronize(s_), "cudaStreamSynchronize"); }

StatusOr<Event> Event::Create(bool timing) {
  Event e;
  TQ_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e.e_, timing ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (e_ != nullptr) cudaEventDestroy(e_);
    e_ = std::exchange(o.e_, nullptr);
  }
  return *this;
}

Event::~Event() {
  if (e_ != nullptr) cudaEventDestroy(e_);
}

StatusOr<float> ElapsedMs(const Event& start, const Event& stop) {
  float ms = 0.0f;
  TQ_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return ms;
}

}  // namespace tq::gpu
