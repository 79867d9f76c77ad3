// Scalar reference kernels for the supported weight types. Never deleted: the SIMD kernels are tested against
// them. All take `n` elements, a multiple of the type's block size (precondition), and a supported type.
//
// Block layouts (little-endian; f16 = IEEE half), elements per block in brackets:
//   F32, F16, BF16 [1]            plain values
//   Q8_0 [32]   d:f16, q:int8[32]                          x = d*q
//   Q4_0 [32]   d:f16, q:u8[16]                            x[j] = d*((q[j]&15)-8), x[j+16] = d*((q[j]>>4)-8)
//   Q4_1 [32]   d:f16, m:f16, q:u8[16]                     x[j] = d*(q[j]&15)+m, x[j+16] = d*(q[j]>>4)+m
//   Q5_0 [32]   d:f16, qh:u32, q:u8[16]                    as Q4_0 with bit j of qh as the 5th bit; x =
//   d*(q-16) Q5_1 [32]   d:f16, m:f16, qh:u32, q:u8[16]             as Q4_1 with bit j of qh as the 5th bit;
//   x = d*q+m Q4_K [256]  d,dmin:f16, scales:u8[12], q:u8[128]       8 sub-blocks of 32 with 6-bit scale and
//   min Q5_K [256]  d,dmin:f16, scales:u8[12], qh:u8[32], q:u8[128]  as Q4_K with a 5th bit from qh Q6_K
//   [256]  ql:u8[128], qh:u8[64], scales:int8[16], d:f16   16 sub-blocks of 16, x = d*scale*(q-32)
// Details in docs/models.md.
#pragma once

#include <cstdint>

#include "kernels/weights/weight_types.h"

namespace tq::kernels {

// dst[0..n) = the values of the n elements at src.
void DequantizeRowRef(WeightType type, const void* src, float* dst, int64_t n);

// sum_i w[i] * x[i] over the n elements of the quantized row `row` and the f32 vector x. Accumulates in
// double.
float DotRowRef(WeightType type, const void* row, const float* x, int64_t n);

// Reference quantizers (simple, not the best-error search GGUF tools use): for tests and for making small
// models. dst holds WeightBytes(type, n) bytes.
void QuantizeRowRef(WeightType type, const float* src, void* dst, int64_t n);

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block's 12 packed scale bytes.
inline void UnpackScaleMinK4(int j, const uint8_t* scales, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = scales[j] & 63;
    *min = scales[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

}  // namespace tq::kernels
