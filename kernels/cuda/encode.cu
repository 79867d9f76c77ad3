// Page encoding on the GPU: one block of 128 threads per page, one thread per token. Every arithmetic step is the
// scalar reference's (KvCodec::EncodeTq / EncodeInt8), in the same order and precision, and this file is compiled
// without FMA contraction, so the bytes equal the reference's.
#include <cuda_fp16.h>

#include <cmath>

#include "kernels/cuda/device_code.cuh"
#include "kernels/cuda/kv_kernels.h"

namespace tq::gpu {
namespace {

using detail::GetCode;
using detail::GroupOf;
using detail::kGroupTokens;
using detail::kHeaderBytes;
using detail::kPageTokens;
using detail::SetCode;

constexpr int kThreads = 128;
constexpr int kMaxDim = 256;

__device__ uint16_t ToHalfBits(float f) { return __half_as_ushort(__float2half_rn(f)); }

// Normalized block Hadamard of x[dim] (blocks of the binary decomposition of dim, largest first), as rotation.cc.
__device__ void BlockHadamard(float* x, int dim) {
  int offset = 0;
  for (int bit = 30; bit >= 0; --bit) {
    const int block = 1 << bit;
    if ((dim & block) == 0) continue;
    float* b = x + offset;
    for (int h = 1; h < block; h *= 2) {
      for (int i = 0; i < block; i += 2 * h) {
        for (int j = i; j < i + h; ++j) {
          const float a = b[j], c = b[j + h];
          b[j] = a + c;
          b[j + h] = a - c;
        }
      }
    }
    const float norm = 1.0f / sqrtf(static_cast<float>(block));
    for (int i = 0; i < block; ++i) b[i] *= norm;
    offset += block;
  }
}

// y (in place, [dims]) = the segment's Hadamard rotation of y.
__device__ void RotateSegment(const GpuCodec& c, const GpuSegment& seg, float* y) {
  float in[kMaxDim];
  for (int r = 0; r < seg.rounds; ++r) {
    const float* signs = c.signs + seg.param_offset + r * seg.dims;
    if (seg.rounds > 1) {
      const int32_t* perm = c.perms + seg.param_offset + r * seg.dims;
      for (int i = 0; i < seg.dims; ++i) in[i] = y[i];
      for (int i = 0; i < seg.dims; ++i) y[i] = in[perm[i]];
    }
    for (int i = 0; i < seg.dims; ++i) y[i] *= signs[i];
    BlockHadamard(y, seg.dims);
  }
}

__device__ uint64_t HeaderHash(const uint64_t* words) {
  uint64_t hash = 0x6a09e667f3bcc908ull;
  for (int w = 0; w < kHeaderBytes / 8; ++w) {
    uint64_t v = words[w];
    if (w == 3) v &= 0xffffffff00000000ull;  // the checksum field reads as zero
    hash = (hash ^ v) * 0x9e3779b97f4a7c15ull;
    hash ^= hash >> 29;
  }
  return hash;
}

// The reference's centroid search (std::upper_bound): #{k : !(u < bounds[k])}, so a NaN gets the last code.
__device__ uint32_t CodeOf(const float* bounds, int nb, float u) {
  uint32_t code = 0;
  while (static_cast<int>(code) < nb && !(u < bounds[code])) ++code;
  return code;
}

// The reference's BestCodeScale (kernels/formats/codec.cc): the candidate scale whose codes point closest to
// y.
__device__ float BestCodeScale(const GpuCodec& c, const GpuSegment& seg, const float* y, float norm) {
  if (seg.bits > c.scale_search_max_bits) return 1.0f;
  const float* bounds = c.boundaries + seg.bound_offset;
  const float* cent = c.tables + seg.table_offset;
  const int nb = (1 << seg.bits) - 1;
  float best_scale = 1.0f;
  float best = -INFINITY;
  for (int k = 0; k < c.num_code_scales; ++k) {
    const float s = c.code_scales[k];
    float dot = 0.0f;  // fp32, multiply then add (this file is compiled with --fmad=false)
    float c2 = 0.0f;
    for (int i = 0; i < seg.dims; ++i) {
      const float t = y[i] / norm;
      const float v = cent[CodeOf(bounds, nb, t * s)];
      dot += v * t;
      c2 += v * v;
    }
    const float score = dot / sqrtf(c2);
    if (score > best) {
      best = score;
      best_scale = s;
    }
  }
  return best_scale;
}

__device__ void EncodeTqToken(const GpuCodec& c, const float* x, int token, uint8_t* page, bool inner_product) {
  const int d = c.head_dim;
  const int t = token % kGroupTokens;
  uint8_t* group = GroupOf(page, c, token);
  float y[kMaxDim];
  for (int i = 0; i < d; ++i) y[i] = c.channel_order != nullptr ? x[c.channel_order[i]] : x[i];
  for (int s = 0; s < c.num_segments; ++s) {
    const GpuSegment& seg = c.seg[s];
    if (seg.slot == 0) RotateSegment(c, seg, y + seg.first);
  }
  uint16_t* norms = reinterpret_cast<uint16_t*>(page + c.norms_offset);
  for (int s = 0; s < c.num_segments; ++s) {
    const GpuSegment& seg = c.seg[s];
    if (seg.slot == 0) {
      double sum = 0.0;
      for (int i = 0; i < seg.dims; ++i) sum += static_cast<double>(y[seg.first + i]) * y[seg.first + i];
      const float norm = static_cast<float>(sqrt(sum));
      const float* bounds = c.boundaries + seg.bound_offset;
      const float* cent = c.tables + seg.table_offset;
      const int nb = (1 << seg.bits) - 1;
      const float scale = norm > 0.0f ? BestCodeScale(c, seg, y + seg.first, norm) : 1.0f;
      double c2 = 0.0, cy = 0.0;
      for (int i = 0; i < seg.dims; ++i) {
        uint32_t code = 0;
        if (norm > 0.0f) code = CodeOf(bounds, nb, y[seg.first + i] / norm * scale);
        SetCode(group, seg, i, t, code);
        c2 += static_cast<double>(cent[code]) * cent[code];
        cy += static_cast<double>(cent[code]) * y[seg.first + i];
      }
      // The reference's NormRule formulas (codec.cc).
      const float corrected = inner_product && cy > 0.0 ? static_cast<float>(sum / cy)
                              : c2 > 0.0                ? static_cast<float>(norm / sqrt(c2))
                                                        : norm;
      const uint16_t norm_half = ToHalfBits(corrected);
      norms[seg.norm_slot * kPageTokens + token] = norm_half;
      const float stored = detail::HalfBits(norm_half);
      for (int i = 0; i < seg.dims; ++i) y[seg.first + i] -= stored * cent[GetCode(group, seg, i, t)];
    } else {  // the QJL sketch of the residual
      double sum = 0.0;
      for (int i = 0; i < d; ++i) sum += static_cast<double>(y[i]) * y[i];
      norms[seg.norm_slot * kPageTokens + token] = ToHalfBits(static_cast<float>(sqrt(sum)));
      for (int j = 0; j < d; ++j) {
        const float* row = c.sketch + static_cast<size_t>(j) * d;
        double acc = 0.0;
        for (int i = 0; i < d; ++i) acc += static_cast<double>(row[i]) * y[i];
        SetCode(group, seg, j, t, static_cast<float>(acc) >= 0.0f ? 1u : 0u);
      }
    }
  }
}

__global__ void EncodeKernel(const GpuCodec* codecs, int codec, const float* x, int64_t stride, int n,
                             uint8_t* const* pages, int* bad_input, bool inner_product) {
  const GpuCodec& c = codecs[codec];
  const int d = c.head_dim;
  uint8_t* page = pages[blockIdx.x];
  const float* xp = x + stride * blockIdx.x;
  const int tid = threadIdx.x;
  uint32_t* words = reinterpret_cast<uint32_t*>(page);
  for (int i = tid; i < c.page_bytes / 4; i += kThreads) words[i] = 0;
  __shared__ float s_max[kThreads];
  __shared__ int s_bad;
  if (tid == 0) s_bad = 0;
  __syncthreads();

  float scale = 0.0f;
  if (c.kind == GpuKind::kInt8) {
    float m = 0.0f;
    bool bad = false;
    for (int i = tid; i < n * d; i += kThreads) {
      const float v = xp[i];
      if (!isfinite(v)) bad = true;
      m = fmaxf(m, fabsf(v));
    }
    s_max[tid] = m;
    if (bad) atomicExch(&s_bad, 1);
    __syncthreads();
    for (int w = kThreads / 2; w > 0; w /= 2) {
      if (tid < w) s_max[tid] = fmaxf(s_max[tid], s_max[tid + w]);
      __syncthreads();
    }
    scale = s_max[0] / 127.0f;
    if (s_bad != 0) {
      if (tid == 0 && bad_input != nullptr) atomicExch(bad_input, 1);
      return;
    }
  }

  for (int token = tid; token < n; token += kThreads) {
    const float* xt = xp + static_cast<int64_t>(token) * d;
    uint8_t* group = GroupOf(page, c, token);
    const int t = token % kGroupTokens;
    switch (c.kind) {
      case GpuKind::kF16:
        for (int i = 0; i < d; ++i) reinterpret_cast<uint16_t*>(group)[i * kGroupTokens + t] = ToHalfBits(xt[i]);
        break;
      case GpuKind::kInt8:
        for (int i = 0; i < d; ++i) {
          const long q = scale > 0.0f ? lroundf(xt[i] / scale) : 0;
          const long clamped = q < -127 ? -127 : q > 127 ? 127 : q;
          SetCode(group, c.seg[0], i, t, static_cast<uint8_t>(static_cast<int8_t>(clamped)));
        }
        break;
      case GpuKind::kTq:
        EncodeTqToken(c, xt, token, page, inner_product);
        break;
    }
  }

  if (tid == 0) {  // the header, as KvCodec::BeginEncode and SealHeader write it
    uint64_t words64[kHeaderBytes / 8] = {};
    uint8_t* h = reinterpret_cast<uint8_t*>(words64);
    const uint32_t magic = 0x564b5154u;
    const uint16_t version = 1, head_dim = static_cast<uint16_t>(d), num_tokens = static_cast<uint16_t>(n);
    memcpy(h + 0, &magic, 4);
    memcpy(h + 4, &version, 2);
    h[6] = static_cast<uint8_t>(c.format);
    h[7] = 0;
    memcpy(h + 8, &head_dim, 2);
    memcpy(h + 10, &num_tokens, 2);
    memcpy(h + 12, &scale, 4);
    memcpy(h + 16, &c.seed, 8);
    memcpy(h + 32, c.outlier_mask, 32);
    const uint64_t hash = HeaderHash(words64);
    const uint32_t checksum = static_cast<uint32_t>(hash ^ (hash >> 32));
    memcpy(h + 24, &checksum, 4);
    for (int i = 0; i < kHeaderBytes; ++i) page[i] = h[i];
  }
}

}  // namespace

Status EncodePages(const DeviceCodecs& codecs, int codec, const float* x, int64_t x_page_stride, int n_tokens,
                   uint8_t* const* pages, int n_pages, int* bad_input, cudaStream_t stream, kernels::NormRule rule) {
  if (codec < 0 || codec >= codecs.size()) return InvalidArgumentError("EncodePages: unknown codec");
  if (n_tokens < 1 || n_tokens > kPageTokens) {
    return InvalidArgumentError("EncodePages: " + std::to_string(n_tokens) + " tokens, need 1..128");
  }
  if (codecs.desc(codec).head_dim > kMaxDim) return InvalidArgumentError("EncodePages: head_dim over 256");
  if (n_pages == 0) return Status::Ok();
  EncodeKernel<<<n_pages, kThreads, 0, stream>>>(codecs.device_table(), codec, x, x_page_stride, n_tokens, pages,
                                                  bad_input, rule == kernels::NormRule::kInnerProduct);
  TQ_CUDA_RETURN_IF_LAUNCH_FAILED("EncodePages");
  return Status::Ok();
}

}  // namespace tq::gpu
