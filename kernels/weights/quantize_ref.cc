// Simple reference quantizers: per-block min/max (or absolute max) scales, round to nearest. Good enough for
// round-trip tests and tiny test models; published GGUFs use a better error search but the same layouts.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "kernels/weights/half.h"
#include "kernels/weights/weight_ref.h"

namespace tq::kernels {
namespace {

void StoreHalf(uint8_t* p, float v) {
  const uint16_t h = FloatToHalf(v);
  std::memcpy(p, &h, sizeof h);
}

int RoundClamp(float v, int lo, int hi) {
  const int q = static_cast<int>(std::lround(v));
  return std::clamp(q, lo, hi);
}

void QuantQ8_0(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d > 0.0f ? 1.0f / d : 0.0f;
  StoreHalf(b, d);
  for (int j = 0; j < 32; ++j)
    b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(RoundClamp(x[j] * id, -127, 127)));
}

// The value of largest magnitude maps to -8, so its sign is kept exactly.
void QuantQ4_0(const float* x, uint8_t* b) {
  float max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > std::fabs(max)) max = x[j];
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  StoreHalf(b, d);
  for (int j = 0; j < 16; ++j) {
    const int lo = RoundClamp(x[j] * id + 8.0f, 0, 15);
    const int hi = RoundClamp(x[j + 16] * id + 8.0f, 0, 15);
    b[2 + j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

void QuantQ4_1(const float* x, uint8_t* b) {
  const auto [mn, mx] = std::minmax_element(x, x + 32);
  const float d = (*mx - *mn) / 15.0f;
  const float id = d > 0.0f ? 1.0f / d : 0.0f;
  StoreHalf(b, d);
  StoreHalf(b + 2, *mn);
  const float m = HalfToFloat(FloatToHalf(*mn));
  for (int j = 0; j < 16; ++j) {
    const int lo = RoundClamp((x[j] - m) * id, 0, 15);
    const int hi = RoundClamp((x[j + 16] - m) * id, 0, 15);
    b[4 + j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

// Q5_0: like Q4_0 with 32 levels (the largest magnitude maps to -16); Q5_1: min/max like Q4_1 with 32 levels.
void QuantQ5(const float* x, uint8_t* b, bool with_min) {
  int levels[32];
  if (with_min) {
    const auto [mn, mx] = std::minmax_element(x, x + 32);
    const float d = (*mx - *mn) / 31.0f;
    StoreHalf(b, d);
    StoreHalf(b + 2, *mn);
    const float m = HalfToFloat(FloatToHalf(*mn));
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; ++j) levels[j] = RoundClamp((x[j] - m) * id, 0, 31);
  } else {
    float max = 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (std::fabs(x[j]) > std::fabs(max)) max = x[j];
    }
    const float d = max / -16.0f;
    StoreHalf(b, d);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; ++j) levels[j] = RoundClamp(x[j] * id + 16.0f, 0, 31);
  }
  uint8_t* p = with_min ? b + 4 : b + 2;
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qh |= static_cast<uint32_t>(levels[j] >> 4) << j;
    qh |= static_cast<uint32_t>(levels[j + 16] >> 4) << (j + 16);
    p[4 + j] = static_cast<uint8_t>((levels[j] & 0xF) | ((levels[j + 16] & 0xF) << 4));
  }
  std::memcpy(p, &qh, sizeof qh);
}

// Q4_K (max_q 15) and Q5_K (max_q 31): sub-block j (32 elements) gets scale s_j = (max - min)/max_q and
// offset m_j = -min (min clamped to <= 0); both are coded in 6 bits against the super-block's d and dmin.
void QuantQ4_K_Q5_K(const float* x, uint8_t* b, bool five_bits) {
  const int max_q = five_bits ? 31 : 15;
  float scale[8], offset[8];
  float max_scale = 0.0f, max_offset = 0.0f;
  for (int j = 0; j < 8; ++j) {
    const auto [mn, mx] = std::minmax_element(x + 32 * j, x + 32 * j + 32);
    const float lo = std::min(*mn, 0.0f);
    scale[j] = (*mx - lo) / static_cast<float>(max_q);
    offset[j] = -lo;
    max_scale = std::max(max_scale, scale[j]);
    max_offset = std::max(max_offset, offset[j]);
  }
  StoreHalf(b, max_scale / 63.0f);
  StoreHalf(b + 2, max_offset / 63.0f);
  const float d = LoadHalf(b), dmin = LoadHalf(b + 2);
  uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(d > 0.0f ? RoundClamp(scale[j] / d, 0, 63) : 0);
    m[j] = static_cast<uint8_t>(dmin > 0.0f ? RoundClamp(offset[j] / dmin, 0, 63) : 0);
  }
  uint8_t* scales = b + 4;
  for (int j = 0; j < 4; ++j) {
    scales[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    scales[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
  uint8_t levels[kQkK];
  for (int e = 0; e < kQkK; ++e) {
    const int j = e / 32;
    const float step = d * sc[j];
    levels[e] = static_cast<uint8_t>(step > 0.0f ? RoundClamp((x[e] + dmin * m[j]) / step, 0, max_q) : 0);
  }
  uint8_t* qh = b + 16;
  uint8_t* q = five_bits ? b + 48 : b + 16;
  if (five_bits) std::memset(qh, 0, 32);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t lo = levels[64 * c + l], hi = levels[64 * c + 32 + l];
      q[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      if (five_bits)
        qh[l] = static_cast<uint8_t>(qh[l] | ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
    }
  }
}

// Q6_K: sub-block j (16 elements) has an int8 scale s_j against the super-block's d; levels -32..31.
void QuantQ6_K(const float* x, uint8_t* b) {
  float sub_scale[16];
  float max_abs_scale = 0.0f;
  for (int j = 0; j < 16; ++j) {
    float max = 0.0f;
    for (int i = 0; i < 16; ++i) {
      if (std::fabs(x[16 * j + i]) > std::fabs(max)) max = x[16 * j + i];
    }
    sub_scale[j] = max / -32.0f;
    max_abs_scale = std::max(max_abs_scale, std::fabs(sub_scale[j]));
  }
  StoreHalf(b + 208, max_abs_scale / 127.0f);
  const float d = LoadHalf(b + 208);
  int8_t* scales = reinterpret_cast<int8_t*>(b + 192);
  uint8_t levels[kQkK];
  for (int j = 0; j < 16; ++j) {
    scales[j] = static_cast<int8_t>(d > 0.0f ? RoundClamp(sub_scale[j] / d, -127, 127) : 0);
    const float step = d * scales[j];
    for (int i = 0; i < 16; ++i) {
      const int e = 16 * j + i;
      levels[e] = static_cast<uint8_t>((step != 0.0f ? RoundClamp(x[e] / step, -32, 31) : 0) + 32);
    }
  }
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t* v = levels + 128 * h + l;  // v[0], v[32], v[64], v[96]: k = 0..3
      ql[64 * h + l] = static_cast<uint8_t>((v[0] & 0xF) | ((v[64] & 0xF) << 4));
      ql[64 * h + l + 32] = static_cast<uint8_t>((v[32] & 0xF) | ((v[96] & 0xF) << 4));
      qh[32 * h + l] =
          static_cast<uint8_t>((v[0] >> 4) | ((v[32] >> 4) << 2) | ((v[64] >> 4) << 4) | ((v[96] >> 4) << 6));
    }
  }
}

}  // namespace

void QuantizeRowRef(WeightType type, const float* src, void* dst, int64_t n) {
  uint8_t* p = static_cast<uint8_t*>(dst);
  const WeightTypeInfo& info = GetWeightTypeInfo(type);
  assert(info.supported && n % info.block_size == 0);
  const int64_t blocks = n / info.block_size;
  switch (type) {
    case WeightType::kF32: std::memcpy(p, src, static_cast<size_t>(n) * sizeof(float)); return;
    case WeightType::kF16:
      for (int64_t i = 0; i < n; ++i) StoreHalf(p + 2 * i, src[i]);
      return;
    case WeightType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t v = FloatToBf16(src[i]);
        std::memcpy(p + 2 * i, &v, sizeof v);
      }
      return;
    case WeightType::kQ8_0:
      for (int64_t i = 0; i < blocks; ++i) QuantQ8_0(src + 32 * i, p + 34 * i);
      return;
    case WeightType::kQ4_0:
      for (int64_t i = 0; i < blocks; ++i) QuantQ4_0(src + 32 * i, p + 18 * i);
      return;
    case WeightType::kQ4_1:
      for (int64_t i = 0; i < blocks; ++i) QuantQ4_1(src + 32 * i, p + 20 * i);
      return;
    case WeightType::kQ5_0:
      for (int64_t i = 0; i < blocks; ++i) QuantQ5(src + 32 * i, p + 22 * i, false);
      return;
    case WeightType::kQ5_1:
      for (int64_t i = 0; i < blocks; ++i) QuantQ5(src + 32 * i, p + 24 * i, true);
      return;
    case WeightType::kQ4_K:
      for (int64_t i = 0; i < blocks; ++i) QuantQ4_K_Q5_K(src + kQkK * i, p + 144 * i, false);
      return;
    case WeightType::kQ5_K:
      for (int64_t i = 0; i < blocks; ++i) QuantQ4_K_Q5_K(src + kQkK * i, p + 176 * i, true);
      return;
    case WeightType::kQ6_K:
      for (int64_t i = 0; i < blocks; ++i) QuantQ6_K(src + kQkK * i, p + 210 * i);
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
  assert(false && "QuantizeRowRef on an unsupported type");
}

}  // namespace tq::kernels
