// Device helpers shared by the CUDA KV kernels: the page layout's code access (as kernels/formats/page.cc) and
// the page header fields. Internal to kernels/cuda.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/codec_desc.h"

namespace tq::gpu::detail {

inline constexpr int kPageTokens = 128;
inline constexpr int kGroupTokens = 16;
inline constexpr int kHeaderBytes = 64;
inline constexpr int kHeaderScaleOffset = 12;  // PageHeader::scale (float)

__device__ inline const uint8_t* GroupOf(const uint8_t* page, const GpuCodec& c, int token) {
  return page + c.codes_offset + c.group_bytes * (token / kGroupTokens);
}
__device__ inline uint8_t* GroupOf(uint8_t* page, const GpuCodec& c, int token) {
  return page + c.codes_offset + c.group_bytes * (token / kGroupTokens);
}
__device__ inline const uint16_t* NormsOf(const uint8_t* page, const GpuCodec& c, int slot) {
  return reinterpret_cast<const uint16_t*>(page + c.norms_offset) + slot * kPageTokens;
}
__device__ inline float HalfBits(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// Code of coordinate i (of the segment) of token t (in its group); widths 1, 2, 3, 4, 8.
__device__ inline uint32_t GetCode(const uint8_t* group, const GpuSegment& seg, int i, int t) {
  const uint8_t* base = group + seg.group_offset;
  if (seg.bits == 3) {
    const uint32_t lo = (base[(i / 4) * kGroupTokens + t] >> ((i % 4) * 2)) & 3u;
    const uint8_t* hi_plane = base + kGroupTokens * (seg.dims / 4);
    const uint32_t hi = (hi_plane[(i / 8) * kGroupTokens + t] >> (i % 8)) & 1u;
    return lo | (hi << 2);
  }
  const int per_row = 8 / seg.bits;
  const uint8_t byte = base[(i / per_row) * kGroupTokens + t];
  return (byte >> ((i % per_row) * seg.bits)) & ((1u << seg.bits) - 1);
}

__device__ inline void SetCode(uint8_t* group, const GpuSegment& seg, int i, int t, uint32_t code) {
  uint8_t* base = group + seg.group_offset;
  auto put = [](uint8_t& byte, int shift, uint32_t mask, uint32_t value) {
    byte = static_cast<uint8_t>((byte & ~(mask << shift)) | ((value & mask) << shift));
  };
  if (seg.bits == 3) {
    put(base[(i / 4) * kGroupTokens + t], (i % 4) * 2, 3u, code);
    uint8_t* hi_plane = base + kGroupTokens * (seg.dims / 4);
    put(hi_plane[(i / 8) * kGroupTokens + t], i % 8, 1u, code >> 2);
    return;
  }
  const int per_row = 8 / seg.bits;
  put(base[(i / per_row) * kGroupTokens + t], (i % per_row) * seg.bits, (1u << seg.bits) - 1, code);
}

}  // namespace tq::gpu::detail
