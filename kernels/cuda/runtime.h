// The CUDA runtime behind one error style: every CUDA call's result becomes a Status naming the call, and device
// memory, pinned host memory, streams and events are owned by small RAII types.
//
// Device memory is plain cudaMalloc (never managed memory); pinned host memory is cudaHostAlloc.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "common/status.h"

namespace tq::gpu {

// OK for cudaSuccess; otherwise Unavailable (no device / driver), ResourceExhausted (out of memory) or Internal,
// with `what` and CUDA's own message.
Status CudaStatus(cudaError_t err, const char* what);

#define TQ_CUDA_RETURN_IF_ERROR(expr) TQ_RETURN_IF_ERROR(::tq::gpu::CudaStatus((expr), #expr))
// After a kernel launch: the launch error, if any.
#define TQ_CUDA_RETURN_IF_LAUNCH_FAILED(what) TQ_RETURN_IF_ERROR(::tq::gpu::CudaStatus(cudaGetLastError(), what))

struct DeviceInfo {
  int count = 0;               // visible devices
  int device = 0;              // the one in use
  std::string name;
  int sm_major = 0, sm_minor = 0;
  int multiprocessors = 0;
  size_t total_bytes = 0;      // device memory
  size_t free_bytes = 0;
  int driver_version = 0;      // CUDA driver API version, e.g. 13000
  int runtime_version = 0;
};

// The first device, or Unavailable with the reason (no driver, no device) where there is none.
StatusOr<DeviceInfo> ProbeDevice();

// Where a CudaBuffer's bytes live: device memory (cudaMalloc) or pinned, portable host memory (cudaHostAlloc).
enum class BufferMemory { kDevice, kPinned };

// Owned bytes of one kind of CUDA memory; moves, frees on destruction.
template <BufferMemory kMemory>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  static StatusOr<CudaBuffer> Allocate(size_t bytes);
  CudaBuffer(CudaBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  CudaBuffer& operator=(CudaBuffer&& o) noexcept;
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;
  ~CudaBuffer();

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }
  // Grows (never shrinks) to at least `bytes`; the contents are not kept.
  Status Reserve(size_t bytes);

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

using DeviceBuffer = CudaBuffer<BufferMemory::kDevice>;
using PinnedBuffer = CudaBuffer<BufferMemory::kPinned>;
extern template class CudaBuffer<BufferMemory::kDevice>;
extern template class CudaBuffer<BufferMemory::kPinned>;

class Stream {
 public:
  static StatusOr<Stream> Create();  // non-blocking with respect to the legacy default stream
  Stream() = default;
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept;
  ~Stream();
  cudaStream_t get() const { return s_; }
  Status Synchronize() const;

 private:
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  static StatusOr<Event> Create(bool timing = false);
  Event() = default;
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  Event& operator=(Event&& o) noexcept;
  ~Event();
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// Milliseconds between two recorded (and completed) timing events.
StatusOr<float> ElapsedMs(const Event& start, const Event& stop);

}  // namespace tq::gpu
