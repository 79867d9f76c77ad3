#include "kernels/cuda/random.h"

#include <algorithm>

namespace tq::gpu {
namespace {

__device__ inline uint64_t Mix(uint64_t z) {  // splitmix64 finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void NormalKernel(float* x, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t h = Mix(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i));
    const float u1 = (static_cast<float>(h >> 40) + 1.0f) * (1.0f / 16777217.0f);  // (0, 1]
    const float u2 = static_cast<float>((h >> 16) & 0xffffff) * (1.0f / 16777216.0f);
    x[i] = scale * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
  }
}

}  // namespace

Status FillNormal(float* x, int64_t n, uint64_t seed, float scale, cudaStream_t stream) {
  if (n <= 0) return Status::Ok();
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 65536);
  NormalKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(x, n, seed, scale);
  TQ_CUDA_RETURN_IF_LAUNCH_FAILED("FillNormal");
  return Status::Ok();
}

}  // namespace tq::gpu
