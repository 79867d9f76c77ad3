// Scalar reference dequantization and dot products. Layouts: weight_ref.h and docs/models.md.
#include "kernels/weights/weight_ref.h"

#include <cassert>
#include <cstring>

#include "kernels/weights/half.h"

namespace tq::kernels {
namespace {

// One block of each type -> `block_size` floats.
void DequantQ8_0(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  const int8_t* q = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q[j]);
}

void DequantQ4_0(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  const uint8_t* q = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((q[j] & 0xF) - 8);
    y[j + 16] = d * static_cast<float>((q[j] >> 4) - 8);
  }
}

void DequantQ4_1(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  const float m = LoadHalf(b + 2);
  const uint8_t* q = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(q[j] & 0xF) + m;
    y[j + 16] = d * static_cast<float>(q[j] >> 4) + m;
  }
}

// Q5_0 (x = d*(q-16)) and Q5_1 (x = d*q + m): the low 4 bits as Q4_0/Q4_1, the fifth bit of element j is bit
// j of the little-endian u32 qh.
void DequantQ5(const uint8_t* b, float* y, bool with_min) {
  const float d = LoadHalf(b);
  const float m = with_min ? LoadHalf(b + 2) : 0.0f;
  const uint8_t* p = with_min ? b + 4 : b + 2;
  uint32_t qh;
  std::memcpy(&qh, p, sizeof qh);
  const uint8_t* q = p + 4;
  const int offset = with_min ? 0 : 16;
  for (int j = 0; j < 16; ++j) {
    const int lo = (q[j] & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (q[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    y[j] = d * static_cast<float>(lo - offset) + m;
    y[j + 16] = d * static_cast<float>(hi - offset) + m;
  }
}

// Q4_K and Q5_K: element e belongs to sub-block e/32; chunk c = e/64 holds sub-blocks 2c (low nibbles of
// q[32c..32c+32)) and 2c+1 (high nibbles). Q5_K's fifth bit of element 64c+l is bit 2c of qh[l] (low half)
// or bit 2c+1 (high half).
void DequantQ4_K_Q5_K(const uint8_t* b, float* y, bool five_bits) {
  const float d = LoadHalf(b);
  const float dmin = LoadHalf(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* q = five_bits ? b + 48 : b + 16;
  for (int c = 0; c < 4; ++c) {
    uint8_t sc0, m0, sc1, m1;
    UnpackScaleMinK4(2 * c, scales, &sc0, &m0);
    UnpackScaleMinK4(2 * c + 1, scales, &sc1, &m1);
    const float d0 = d * sc0, min0 = dmin * m0, d1 = d * sc1, min1 = dmin * m1;
    for (int l = 0; l < 32; ++l) {
      int lo = q[32 * c + l] & 0xF;
      int hi = q[32 * c + l] >> 4;
      if (five_bits) {
        lo |= ((qh[l] >> (2 * c)) & 1) << 4;
        hi |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
      }
      y[64 * c + l] = d0 * static_cast<float>(lo) - min0;
      y[64 * c + 32 + l] = d1 * static_cast<float>(hi) - min1;
    }
  }
}

// Q6_K: element e = 128h + 32k + l (h 0..1, k 0..3, l 0..31) has sub-block e/16; its low 4 bits are the low
// (k even) or high (k odd) nibble of ql[64h + l + 32*(k&1)], its high 2 bits are bits 2k..2k+1 of qh[32h +
// l].
void DequantQ6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = LoadHalf(b + 208);
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        const int e = 128 * h + 32 * k + l;
        const uint8_t low_byte = ql[64 * h + l + 32 * (k & 1)];
        const int low = (k < 2) ? (low_byte & 0xF) : (low_byte >> 4);
        const int high = (qh[32 * h + l] >> (2 * k)) & 3;
        y[e] = d * static_cast<float>(scales[e / 16]) * static_cast<float>((low | (high << 4)) - 32);
      }
    }
  }
}

}  // namespace

void DequantizeRowRef(WeightType type, const void* src, float* dst, int64_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(src);
  const WeightTypeInfo& info = GetWeightTypeInfo(type);
  assert(info.supported && n % info.block_size == 0);
  const int64_t blocks = n / info.block_size;
  switch (type) {
    case WeightType::kF32: std::memcpy(dst, p, static_cast<size_t>(n) * sizeof(float)); return;
    case WeightType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = LoadHalf(p + 2 * i);
      return;
    case WeightType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(LoadU16(p + 2 * i));
      return;
    case WeightType::kQ8_0:
      for (int64_t i = 0; i < blocks; ++i) DequantQ8_0(p + 34 * i, dst + 32 * i);
      return;
    case WeightType::kQ4_0:
      for (int64_t i = 0; i < blocks; ++i) DequantQ4_0(p + 18 * i, dst + 32 * i);
      return;
    case WeightType::kQ4_1:
      for (int64_t i = 0; i < blocks; ++i) DequantQ4_1(p + 20 * i, dst + 32 * i);
      return;
    case WeightType::kQ5_0:
      for (int64_t i = 0; i < blocks; ++i) DequantQ5(p + 22 * i, dst + 32 * i, false);
      return;
    case WeightType::kQ5_1:
      for (int64_t i = 0; i < blocks; ++i) DequantQ5(p + 24 * i, dst + 32 * i, true);
      return;
    case WeightType::kQ4_K:
      for (int64_t i = 0; i < blocks; ++i) DequantQ4_K_Q5_K(p + 144 * i, dst + kQkK * i, false);
      return;
    case WeightType::kQ5_K:
      for (int64_t i = 0; i < blocks; ++i) DequantQ4_K_Q5_K(p + 176 * i, dst + kQkK * i, true);
      return;
    case WeightType::kQ6_K:
      for (int64_t i = 0; i < blocks; ++i) DequantQ6_K(p + 210 * i, dst + kQkK * i);
      return;
    case WeightType::kQ8_1:
    case WeightType::kQ2_K:
    case WeightType::kQ3_K:
    case WeightType::kQ8_K:
    case WeightType::kIQ2_XXS:
    case WeightType::kIQ2_XS:
    case WeightType::kIQ3_XXS:
    case WeightType::kIQ1_S:
    case WeightType::kIQ4_NL:
    case WeightType::kIQ3_S:
    case WeightType::kIQ2_S:
    case WeightType::kIQ4_XS:
    case WeightType::kI8:
    case WeightType::kI16:
    case WeightType::kI32:
    case WeightType::kI64:
    case WeightType::kF64:
    case WeightType::kIQ1_M:
    case WeightType::kTQ1_0:
    case WeightType::kTQ2_0:
    case WeightType::kMXFP4: break;
  }
  assert(false && "DequantizeRowRef on an unsupported type (callers check CheckWeightTypeSupported)");
}

float DotRowRef(WeightType type, const void* row, const float* x, int64_t n) {
  const WeightTypeInfo& info = GetWeightTypeInfo(type);
  const int64_t block_size = info.block_size;
  // Dequantize a chunk of whole blocks at a time (256 elements is a multiple of every supported block size).
  constexpr int64_t kChunk = kQkK;
  float w[kChunk];
  double sum = 0.0;
  const uint8_t* p = static_cast<const uint8_t*>(row);
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = (n - i < kChunk) ? n - i : kChunk;
    assert(len % block_size == 0);
    DequantizeRowRef(type, p + (i / block_size) * info.block_bytes, w, len);
    for (int64_t j = 0; j < len; ++j) sum += static_cast<double>(w[j]) * static_cast<double>(x[i + j]);
  }
  return static_cast<float>(sum);
}

}  // namespace tq::kernels
