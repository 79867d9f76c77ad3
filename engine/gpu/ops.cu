#include "engine/gpu/ops.h"

#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/runtime.h"

namespace tq::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
constexpr int kMaxBatchTile = 16;

unsigned Blocks(int64_t n, int per_block = kThreads) { return static_cast<unsigned>((n + per_block - 1) / per_block); }

__global__ void EmbedKernel(const __half* table, int64_t cols, const int32_t* tokens, float* out) {
  const int r = blockIdx.x;
  const __half* row = table + static_cast<int64_t>(tokens[r]) * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[r * cols + c] = __half2float(row[c]);
}

// One block of kThreads per row.
__global__ void RmsNormKernel(const float* x, const float* gain, int n, float eps, float* out) {
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  float* outr = out + static_cast<int64_t>(blockIdx.x) * n;
  double ss = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += static_cast<double>(xr[i]) * xr[i];
  for (int off = 16; off > 0; off /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  __shared__ double warp_sums[kWarpsPerBlock];
  __shared__ float scale_shared;
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = ss;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0;
    for (int w = 0; w < kWarpsPerBlock; ++w) total += warp_sums[w];
    scale_shared = 1.0f / sqrtf(static_cast<float>(total / n) + eps);
  }
  __syncthreads();
  const float scale = scale_shared;
  for (int i = threadIdx.x; i < n; i += blockDim.x) outr[i] = xr[i] * scale * gain[i];
}

// One warp per row of w; TB batch rows (nb <= TB valid) share each weight load. kVec: 8 halfs (16 bytes) per lane
// load, which needs cols % 8 == 0 and 16-byte aligned rows of w and x.
template <int TB, bool kVec>
__global__ void MatMulKernel(const __half* __restrict__ w, int rows, int cols, const float* __restrict__ x,
                             int64_t x_stride, int nb, float* __restrict__ y, int64_t y_stride, bool accumulate) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const __half* wr = w + static_cast<int64_t>(row) * cols;
  float acc[TB];
#pragma unroll
  for (int b = 0; b < TB; ++b) acc[b] = 0.0f;
  if constexpr (kVec) {
    const uint4* w8 = reinterpret_cast<const uint4*>(wr);
    for (int c8 = lane; c8 < cols / 8; c8 += 32) {
      const uint4 raw = __ldg(w8 + c8);
      const __half2* h2 = reinterpret_cast<const __half2*>(&raw);
      float wf[8];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 f = __half22float2(h2[j]);
        wf[2 * j] = f.x;
        wf[2 * j + 1] = f.y;
      }
#pragma unroll
      for (int b = 0; b < TB; ++b) {
        if (b < nb) {
          const float4* xb = reinterpret_cast<const float4*>(x + b * x_stride + c8 * 8);
          const float4 a = __ldg(xb), c = __ldg(xb + 1);
          acc[b] += wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w + wf[4] * c.x + wf[5] * c.y +
                    wf[6] * c.z + wf[7] * c.w;
        }
      }
    }
  } else {
    for (int c = lane; c < cols; c += 32) {
      const float wf = __half2float(wr[c]);
#pragma unroll
      for (int b = 0; b < TB; ++b) {
        if (b < nb) acc[b] += wf * x[b * x_stride + c];
      }
    }
  }
#pragma unroll
  for (int b = 0; b < TB; ++b) {
    float v = acc[b];
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (lane == 0 && b < nb) {
      float* out = y + b * y_stride + row;
      *out = accumulate ? *out + v : v;
    }
  }
}

template <int TB>
void LaunchMatMul(bool vec, const __half* w, int rows, int cols, const float* x, int64_t x_stride, int nb, float* y,
                  int64_t y_stride, bool accumulate, cudaStream_t stream) {
  const unsigned blocks = Blocks(rows, kWarpsPerBlock);
  if (vec) {
    MatMulKernel<TB, true><<<blocks, kThreads, 0, stream>>>(w, rows, cols, x, x_stride, nb, y, y_stride, accumulate);
  } else {
    MatMulKernel<TB, false><<<blocks, kThreads, 0, stream>>>(w, rows, cols, x, x_stride, nb, y, y_stride, accumulate);
  }
}

__global__ void AddBiasKernel(float* y, int64_t y_stride, const float* bias, int n, int batch) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(n) * batch) return;
  const int64_t b = i / n, c = i % n;
  y[b * y_stride + c] += bias[c];
}

__global__ void RopeKernel(float* x, int64_t x_stride, int batch, int n_heads, int head_dim, int n_rot,
                           const int32_t* pos, float base, const float* divisors, bool neox) {
  const int half = n_rot / 2;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= static_cast<int64_t>(batch) * n_heads * half) return;
  const int i = static_cast<int>(t % half);
  const int h = static_cast<int>(t / half % n_heads);
  const int b = static_cast<int>(t / half / n_heads);
  // As RopeAngles in engine/llm/model.cc: the angle in double, cos and sin rounded to float.
  double theta = pos[b] * pow(static_cast<double>(base), -2.0 * i / n_rot);
  if (divisors != nullptr) theta /= divisors[i];
  const float c = static_cast<float>(cos(theta));
  const float s = static_cast<float>(sin(theta));
  float* v = x + b * x_stride + static_cast<int64_t>(h) * head_dim;
  const int ia = neox ? i : 2 * i;
  const int ib = neox ? i + half : 2 * i + 1;
  const float x0 = v[ia], x1 = v[ib];
  v[ia] = x0 * c - x1 * s;
  v[ib] = x0 * s + x1 * c;
}

__global__ void SwiGluKernel(const float* gu, int n, int batch, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(n) * batch) return;
  const int64_t b = i / n, c = i % n;
  const float g = gu[b * 2 * n + c];
  out[i] = g / (1.0f + expf(-g)) * gu[b * 2 * n + n + c];
}

__global__ void ScatterKvKernel(const float* k, const float* v, int64_t kv_stride, int batch, int n_kv, int d,
                                float* tail_k, float* tail_v, int64_t head_stride, int first_slot) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= static_cast<int64_t>(batch) * n_kv * d) return;
  const int i = static_cast<int>(t % d);
  const int h = static_cast<int>(t / d % n_kv);
  const int b = static_cast<int>(t / d / n_kv);
  const int64_t dst = h * head_stride + static_cast<int64_t>(first_slot + b) * d + i;
  tail_k[dst] = k[b * kv_stride + static_cast<int64_t>(h) * d + i];
  tail_v[dst] = v[b * kv_stride + static_cast<int64_t>(h) * d + i];
}

__device__ uint64_t SplitMix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void RandomNormalKernel(float* x, int64_t n, uint64_t seed, float scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint64_t a = SplitMix64(seed ^ SplitMix64(2 * static_cast<uint64_t>(i)));
  const uint64_t b = SplitMix64(seed ^ SplitMix64(2 * static_cast<uint64_t>(i) + 1));
  const double u1 = (static_cast<double>(a >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
  const double u2 = static_cast<double>(b >> 11) * 0x1.0p-53;          // [0, 1)
  x[i] = scale * static_cast<float>(sqrt(-2.0 * log(u1)) * cospi(2.0 * u2));
}

}  // namespace

Status EmbedRows(const uint16_t* table, int64_t cols, const int32_t* tokens, int rows, float* out,
                 cudaStream_t stream) {
  if (rows <= 0) return Status::Ok();
  EmbedKernel<<<rows, kThreads, 0, stream>>>(reinterpret_cast<const __half*>(table), cols, tokens, out);
  TQ_CUDA_RETURN_IF_LAUNCH_FAILED("EmbedRows");
  return Status::Ok();
}

Status RmsNorm(const float* x, const float* gain, int rows, int n, float eps, float* out, cudaStream_t stream) {
  if (rows <= 0) return Status::Ok();
  RmsNormKernel<<<rows, kThreads, 0, stream>>>(x, gain, n, eps, out);
  TQ_CUDA_RETURN_IF_LAUNCH_FAILED("RmsNorm");
  return Status::Ok();
}

Status MatMulF16(const uint16_t* w, int rows, int cols, const float* x, int64_t x_stride, int batch, float* y,
                 int64_t y_stride, bool accumulate, cudaStream_t stream) {
  const __half* wh = reinterpret_cast<const __half*>(w);
  const bool vec = cols % 8 == 0 && x_stride % 4 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(x) % 16 == 0;
  for (int b0 = 0; b0 < batch; b0 += kMaxBatchTile) {
    const int nb = std::min(kMaxBatchTile, batch - b0);
    const float* xb = x + b0 * x_stride;
    float* yb = y + b0 * y_stride;
    if (nb == 1) {
      LaunchMatMul<1>(vec, wh, rows, cols, xb, x_stride, nb, yb, y_stride, accumulate, stream);
    } else if (nb == 2) {
      LaunchMatMul<2>(vec, wh, rows, cols, xb, x_stride, nb, yb, y_stride, accumulate, stream);
    } else if (nb <= 4) {
      LaunchMatMul<4>(vec, wh, rows, cols, xb, x_stride, nb, yb, y_stride, accumulate, stream);
    } else if (nb <= 8) {
      LaunchMatMul<8>(vec, wh, rows, cols, xb, x_stride, nb, yb, y_stride, accumulate, stream);
    } else {
      LaunchMatMul<16>(vec, wh, rows, cols, xb, x_stride, nb, yb, y_stride, accumulate, stream);
    }
    TQ_CUDA_RETURN_IF_LAUNCH_FAILED("MatMulF16");
  }
  return Status::Ok();
}

Status AddBias(float* y, int64_t y_stride, const float* bias, int n, int batch, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(n) * batch;
  if (total <= 0) return Status::Ok();
  AddBiasKernel<<<Blocks(total), kThreads, 0, stream>>>(y, y_stride, bias, n, batch);
  TQ_CUDA_RETURN_IF_LAUNCH_FAILED("AddBias");
  return Status::Ok();
}

Status Rope(float* x, int64_t x_stride, int batch, int n_heads, int head_dim, int n_rot, const int32_t* pos,
            float base, const float* divisors, bool neox, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(batch) * n_heads * (n_rot / 2);
  if (total <= 0) return Status::Ok();
  RopeKernel<<<Blocks(total), kThreads, 0, stream>>>(x, x_stride, batch, n_heads, head_dim, n_rot, pos, base,
                                                     divisors, neox);
  TQ_CUDA_RETURN_IF_LAUNCH_FAILED("Rope");
  return Status::Ok();
}

Status SwiGlu(const float* gu, int n, int batch, float* out, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(n) * batch;
  if (total <= 0) return Status::Ok();
  SwiGluKernel<<<Blocks(total), kThreads, 0, stream>>>(gu, n, batch, out);
  TQ_CUDA_RETURN_IF_LAUNCH_FAILED("SwiGlu");
  return Status::Ok();
}

Status ScatterKv(const float* k, const float* v, int64_t kv_stride, int batch, int n_kv, int d, float* tail_k,
                 float* tail_v, int64_t head_stride, int first_slot, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(batch) * n_kv * d;
  if (total <= 0) return Status::Ok();
  ScatterKvKernel<<<Blocks(total), kThreads, 0, stream>>>(k, v, kv_stride, batch, n_kv, d, tail_k, tail_v,
                                                          head_stride, first_slot);
  TQ_CUDA_RETURN_IF_LAUNCH_FAILED("ScatterKv");
  return Status::Ok();
}

Status RandomNormal(float* x, int64_t n, uint64_t seed, float scale, cudaStream_t stream) {
  if (n <= 0) return Status::Ok();
  RandomNormalKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, seed, scale);
  TQ_CUDA_RETURN_IF_LAUNCH_FAILED("RandomNormal");
  return Status::Ok();
}

}  // namespace tq::gpu
