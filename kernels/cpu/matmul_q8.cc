// The int8 path of the weight-matrix product: block-quantized weights times 8-bit activations (layouts in
// matmul_q8.h). Per thread and tile of kR weight rows:
//   panel tiles: decode the rows into a panel (u8/int8 codes, a scale and a min per half-block), then multiply it
//     with kT activation records at a time, kR x kT accumulators in registers (all types, all batch sizes);
//   direct tiles (x86: Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q4_K / Q6_K, batch <= DirectMaxBatch): unpack each block in
//     registers, no panel (matmul_q8_direct_k-inl.h for the K-quants). Each does the float arithmetic of the
//     panel tile of its target in the same order, so the product is batch-invariant: a row's result is bit for
//     bit the same whatever else is in the batch (MatMulTest.BatchInvariantResultsAreBitwiseEqual).
// x86 targets use integer dot products per block of 32: AVX-512 VNNI's dpbusd on AVX3_DL, maddubs + madd
// otherwise; AVX3 / AVX3_DL panel tiles take two blocks per 512-bit vector. Other targets run the panel tiles in
// scalar integer code.
#include "kernels/cpu/matmul_q8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/weights/half.h"
#include "kernels/weights/weight_ref.h"

// Compile the Ice Lake+ target (AVX-512 VNNI) too; Highway 1.0.3 leaves it out unless asked.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/matmul_q8.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#ifndef TQ_KERNELS_CPU_MATMUL_Q8_SHARED_  // once, not per target
#define TQ_KERNELS_CPU_MATMUL_Q8_SHARED_
namespace tq::kernels {
namespace q8 {
inline constexpr int kR = 4;  // weight rows per panel (kMatMulRowTile)
static_assert(kR == kMatMulRowTile);
// Bytes of one panel row: codes, then f32 sc[2 * nb] and f32 mn[2 * nb].
inline int64_t PanelRowBytes(int64_t cols) { return cols + (cols / 32) * 16; }
// Bytes of one K-quant panel row on AVX-512 targets (matmul_q8_panel_k-inl.h).
inline int64_t KPanelRowBytes(int64_t cols) { return 2 * cols + 8 * (cols / 32); }
}  // namespace q8
}  // namespace tq::kernels
#endif

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET == HWY_AVX3_DL
#pragma GCC target("avx512vnni")  // Highway's AVX3_DL runtime check includes AVX512_VNNI
#endif
namespace tq::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using q8::kR;
using q8::KPanelRowBytes;
using q8::PanelRowBytes;

#undef TQ_Q8_X86
#undef TQ_Q8_512
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define TQ_Q8_X86 1
#define TQ_Q8_512 (HWY_TARGET != HWY_AVX2)  // the panel tiles use 512-bit vectors where there are
// Activation records per tile: AVX2 has 16 vector registers, AVX-512 32.
constexpr int kTMax = HWY_TARGET == HWY_AVX2 ? 2 : 4;
inline float F16(const uint8_t* p) { return _cvtsh_ss(LoadU16(p)); }
inline __m256 BroadcastF16(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<int16_t>(LoadU16(p))));
}
#else
#define TQ_Q8_X86 0
#define TQ_Q8_512 0
constexpr int kTMax = 4;
inline float F16(const uint8_t* p) { return LoadHalf(p); }
#endif

// ---------------------------------------------------------------- activations

// Blocks with amax at or below this quantize to zero codes (127 / amax would overflow f32 near the subnormals).
constexpr float kTinyAmax = 1e-30f;

// Codes of one block of 32 at scale 127 / amax (0 for amax <= kTinyAmax); returns the sums of its two halves.
inline void QuantizeBlock(const float* xb, float amax, int8_t* qb, int32_t sum[2]) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<int8_t, decltype(df)> d8;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const float inv = amax > kTinyAmax ? 127.0f / amax : 0.0f;
  sum[0] = sum[1] = 0;
  if (lanes <= 16) {
    const auto vinv = hn::Set(df, inv);
    auto vsum0 = hn::Zero(di), vsum1 = hn::Zero(di);
    for (int64_t k = 0; k < 32; k += lanes) {
      const auto qi = hn::NearestInt(hn::Mul(hn::LoadU(df, xb + k), vinv));
      hn::StoreU(hn::DemoteTo(d8, qi), d8, qb + k);
      if (k < 16) {
        vsum0 = hn::Add(vsum0, qi);
      } else {
        vsum1 = hn::Add(vsum1, qi);
      }
    }
    sum[0] = hn::GetLane(hn::SumOfLanes(di, vsum0));
    sum[1] = hn::GetLane(hn::SumOfLanes(di, vsum1));
  } else {  // vectors wider than a half-block
    for (int k = 0; k < 32; ++k) {
      qb[k] = static_cast<int8_t>(std::nearbyint(xb[k] * inv));
      sum[k / 16] += qb[k];
    }
  }
}

// max |x[i]| over n (a multiple of 32) values.
inline float AbsMax(const float* x, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  if (lanes > 16) {
    float amax = 0.0f;
    for (int64_t k = 0; k < n; ++k) amax = std::max(amax, std::fabs(x[k]));
    return amax;
  }
  auto vmax = hn::Zero(df);
  for (int64_t k = 0; k < n; k += lanes) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, x + k)));
  return hn::GetLane(hn::MaxOfLanes(df, vmax));
}

// Every block of 32 values of x gets its own scale, for every weight type.
void QuantizeRows(const float* x, int64_t cols, int64_t b_begin, int64_t b_end, uint8_t* acts) {
  const int64_t nb = cols / 32, stride = Q8ActivationStride(cols);
  for (int64_t b = b_begin; b < b_end; ++b) {
    const float* xr = x + b * cols;
    uint8_t* rec = acts + b * stride;
    auto* q = reinterpret_cast<int8_t*>(rec);
    auto* d = reinterpret_cast<float*>(rec + cols);
    float* s = d + nb;
    for (int64_t blk = 0; blk < nb; ++blk) {
      const float amax = AbsMax(xr + 32 * blk, 32);
      int32_t sum[2];
      QuantizeBlock(xr + 32 * blk, amax, q + 32 * blk, sum);
      d[blk] = amax / 127.0f;
      s[2 * blk] = d[blk] * static_cast<float>(sum[0]);
      s[2 * blk + 1] = d[blk] * static_cast<float>(sum[1]);
      s[2 * nb + blk] = d[blk] * static_cast<float>(sum[0] + sum[1]);
    }
  }
}

// ---------------------------------------------------------------- panel decoders (one weight row)

#if TQ_Q8_X86
using V32 = __m256i;  // 32 codes
inline V32 Load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline void Store32(uint8_t* p, V32 v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
inline V32 And15(V32 v) { return _mm256_and_si256(v, _mm256_set1_epi8(15)); }
// Bytes of v shifted right by `bits` (< 8), masked to `mask`: 16-bit shifts are exact after the mask.
inline V32 ShiftMask(V32 v, int bits, int mask) {
  return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(bits)), _mm256_set1_epi8(static_cast<char>(mask)));
}
inline V32 Shl4(V32 v) { return _mm256_slli_epi16(v, 4); }  // bytes < 16: no carry into the next byte
#endif

#if TQ_Q8_X86
// The 8 bytes of lo (bytes 0-3) and hi (bytes 4-7) as floats.
inline __m256 Bytes8ToFloat(uint32_t lo, uint32_t hi) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_setr_epi32(static_cast<int>(lo), static_cast<int>(hi), 0, 0)));
}
// out[2j] = out[2j + 1] = v[j], j < 8: a value per sub-block of 32 stored once per half-block of 16.
inline void StoreHalves(__m256 v, float* out) {
  const __m256 lo = _mm256_unpacklo_ps(v, v), hi = _mm256_unpackhi_ps(v, v);  // [0 0 1 1 | 4 4 5 5], [2 2 3 3 | ..]
  _mm256_storeu_ps(out, _mm256_permute2f128_ps(lo, hi, 0x20));
  _mm256_storeu_ps(out + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
}
#endif

#if TQ_Q8_X86
// Codes of 32 elements from 16 packed bytes: the bytes in both halves, the upper half shifted by a nibble.
inline V32 Nibbles(const uint8_t* q) {
  const V32 v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
  return And15(_mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4)));
}
#endif

inline uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

#if TQ_Q8_X86
// 16 at byte i where bit i of qh is set, else 0 (Q5_0's fifth code bit), i < 32.
inline V32 FifthBits(uint32_t qh) {
#if TQ_Q8_512
  return _mm256_maskz_mov_epi8(qh, _mm256_set1_epi8(16));
#else
  // Byte i takes qh's byte i / 8, tests bit i % 8.
  const V32 bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)),
                                        _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL,
                                                           0x0303030303030303LL));
  const V32 bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit), _mm256_set1_epi8(16));
#endif
}
#endif

// Codes (0..31) of one Q5_0 block's 32 elements: nibbles of q (low first), fifth bits from qh.
inline void UnpackQ5_0(const uint8_t* __restrict q, uint32_t qh, uint8_t* __restrict c) {
#if TQ_Q8_X86
  Store32(c, _mm256_or_si256(Nibbles(q), FifthBits(qh)));
#else
  for (int j = 0; j < 16; ++j) {
    c[j] = static_cast<uint8_t>((q[j] & 15) | (((qh >> j) & 1) << 4));
    c[j + 16] = static_cast<uint8_t>((q[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
  }
#endif
}

// Codes of 32 elements from 16 packed bytes: low nibbles first, then high nibbles.
inline void UnpackNibbles(const uint8_t* __restrict q, uint8_t* __restrict c) {
#if TQ_Q8_X86
  Store32(c, Nibbles(q));
#else
  for (int j = 0; j < 16; ++j) {
    c[j] = q[j] & 15;
    c[j + 16] = q[j] >> 4;
  }
#endif
}

// Codes of one Q4_K / Q5_K super-block (256 elements; layout in weight_ref.cc).
inline void UnpackK4(const uint8_t* __restrict q, const uint8_t* __restrict qh, bool five, uint8_t* __restrict cs) {
  for (int ch = 0; ch < 4; ++ch) {  // sub-blocks 2ch (low nibbles) and 2ch + 1 (high nibbles)
#if TQ_Q8_X86
    const V32 v = Load32(q + 32 * ch);
    V32 lo = And15(v), hi = ShiftMask(v, 4, 15);
    if (five) {
      const V32 h = Load32(qh);
      lo = _mm256_or_si256(lo, Shl4(ShiftMask(h, 2 * ch, 1)));
      hi = _mm256_or_si256(hi, Shl4(ShiftMask(h, 2 * ch + 1, 1)));
    }
    Store32(cs + 64 * ch, lo);
    Store32(cs + 64 * ch + 32, hi);
#else
    for (int l = 0; l < 32; ++l) {
      int lo = q[32 * ch + l] & 15, hi = q[32 * ch + l] >> 4;
      if (five) {
        lo |= ((qh[l] >> (2 * ch)) & 1) << 4;
        hi |= ((qh[l] >> (2 * ch + 1)) & 1) << 4;
      }
      cs[64 * ch + l] = static_cast<uint8_t>(lo);
      cs[64 * ch + 32 + l] = static_cast<uint8_t>(hi);
    }
#endif
  }
}

// Codes (0..63) of one Q6_K super-block (layout in weight_ref.cc).
inline void UnpackQ6K(const uint8_t* __restrict ql, const uint8_t* __restrict qh, uint8_t* __restrict cs) {
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < 4; ++k) {
      const uint8_t* lb = ql + 64 * h + 32 * (k & 1);
      const int shift = k < 2 ? 0 : 4;
#if TQ_Q8_X86
      const V32 low = ShiftMask(Load32(lb), shift, 15);
      const V32 high = ShiftMask(Load32(qh + 32 * h), 2 * k, 3);
      Store32(cs + 128 * h + 32 * k, _mm256_or_si256(low, Shl4(high)));
#else
      for (int l = 0; l < 32; ++l) {
        cs[128 * h + 32 * k + l] =
            static_cast<uint8_t>(((lb[l] >> shift) & 15) | (((qh[32 * h + l] >> (2 * k)) & 3) << 4));
      }
#endif
    }
  }
}

void DecodePanelRow(WeightType type, const uint8_t* row, int64_t cols, uint8_t* panel) {
  const int64_t nb = cols / 32;
  uint8_t* c = panel;
  auto* sc = reinterpret_cast<float*>(panel + cols);
  float* mn = sc + 2 * nb;
  switch (type) {
    case WeightType::kQ8_0:
      for (int64_t i = 0; i < nb; ++i) {
        const uint8_t* b = row + 34 * i;
        std::memcpy(c + 32 * i, b + 2, 32);
        sc[2 * i] = sc[2 * i + 1] = F16(b);
        mn[2 * i] = mn[2 * i + 1] = 0.0f;
      }
      return;
    case WeightType::kQ4_0:
      for (int64_t i = 0; i < nb; ++i) {
        const uint8_t* b = row + 18 * i;
        UnpackNibbles(b + 2, c + 32 * i);
        const float d = F16(b);
        sc[2 * i] = sc[2 * i + 1] = d;
        mn[2 * i] = mn[2 * i + 1] = -8.0f * d;
      }
      return;
    case WeightType::kQ5_0:
      for (int64_t i = 0; i < nb; ++i) {
        const uint8_t* b = row + 22 * i;
        UnpackQ5_0(b + 6, LoadU32(b + 2), c + 32 * i);
        const float d = F16(b);
        sc[2 * i] = sc[2 * i + 1] = d;
        mn[2 * i] = mn[2 * i + 1] = -16.0f * d;
      }
      return;
    case WeightType::kQ4_1:
      for (int64_t i = 0; i < nb; ++i) {
        const uint8_t* b = row + 20 * i;
        UnpackNibbles(b + 4, c + 32 * i);
        sc[2 * i] = sc[2 * i + 1] = F16(b);
        mn[2 * i] = mn[2 * i + 1] = F16(b + 2);
      }
      return;
    case WeightType::kQ4_K:
    case WeightType::kQ5_K: {
      const bool five = type == WeightType::kQ5_K;
      const int64_t block_bytes = five ? 176 : 144;
      for (int64_t sb = 0; sb < cols / kQkK; ++sb) {
        const uint8_t* b = row + block_bytes * sb;
        const float d = F16(b), dmin = F16(b + 2);
        const uint8_t* qh = b + 16;
        const uint8_t* q = five ? b + 48 : b + 16;
        UnpackK4(q, qh, five, c + kQkK * sb);
#if TQ_Q8_X86
        // The 6-bit scales and mins of the 8 sub-blocks, from three little-endian words of the 12 scale bytes
        // (layout: UnpackScaleMinK4), widened to f32 and stored once per half-block.
        uint32_t word[3];
        std::memcpy(word, b + 4, 12);
        const uint32_t scales_lo = word[0] & 0x3F3F3F3Fu, mins_lo = word[1] & 0x3F3F3F3Fu;
        const uint32_t scales_hi = (word[2] & 0x0F0F0F0Fu) | (((word[0] >> 6) & 0x03030303u) << 4);
        const uint32_t mins_hi = ((word[2] >> 4) & 0x0F0F0F0Fu) | (((word[1] >> 6) & 0x03030303u) << 4);
        StoreHalves(_mm256_mul_ps(_mm256_set1_ps(d), Bytes8ToFloat(scales_lo, scales_hi)), sc + 16 * sb);
        StoreHalves(_mm256_mul_ps(_mm256_set1_ps(-dmin), Bytes8ToFloat(mins_lo, mins_hi)), mn + 16 * sb);
#else
        for (int j = 0; j < 8; ++j) {
          uint8_t s6, m6;
          UnpackScaleMinK4(j, b + 4, &s6, &m6);
          const int64_t h = 16 * sb + 2 * j;
          sc[h] = sc[h + 1] = d * static_cast<float>(s6);
          mn[h] = mn[h + 1] = -dmin * static_cast<float>(m6);
        }
#endif
      }
      return;
    }
    case WeightType::kQ6_K:
      for (int64_t sb = 0; sb < cols / kQkK; ++sb) {
        const uint8_t* b = row + 210 * sb;
        const uint8_t* ql = b;
        const uint8_t* qh = b + 128;
        const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
        const float d = F16(b + 208);
        UnpackQ6K(ql, qh, c + kQkK * sb);
#if TQ_Q8_X86
        const __m128i s8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales));
        const __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(-32.0f * d);
        const __m256 s_lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s8));
        const __m256 s_hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(s8, s8)));
        _mm256_storeu_ps(sc + 16 * sb, _mm256_mul_ps(vd, s_lo));
        _mm256_storeu_ps(sc + 16 * sb + 8, _mm256_mul_ps(vd, s_hi));
        _mm256_storeu_ps(mn + 16 * sb, _mm256_mul_ps(vm, s_lo));
        _mm256_storeu_ps(mn + 16 * sb + 8, _mm256_mul_ps(vm, s_hi));
#else
        for (int j = 0; j < 16; ++j) {
          const float s16 = d * static_cast<float>(scales[j]);
          sc[16 * sb + j] = s16;
          mn[16 * sb + j] = -32.0f * s16;
        }
#endif
      }
      return;
    default:
      return;  // not an int8-path type (MatMulRowsQ8 is only called for IsQ8PathType)
  }
}

// ---------------------------------------------------------------- tiles


// sum_i mn[i] * s[i] over n half-blocks.
inline float MinTerm(const float* mn, const float* s, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  auto acc = hn::Zero(df);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) acc = hn::MulAdd(hn::LoadU(df, mn + i), hn::LoadU(df, s + i), acc);
  float sum = hn::GetLane(hn::SumOfLanes(df, acc));
  for (; i < n; ++i) sum += mn[i] * s[i];
  return sum;
}

#if TQ_Q8_X86
// Per int32 lane j: sum over bytes 4j..4j+3 of w (u8) * x (int8).
inline __m256i DotQuads(__m256i w, __m256i x) {
#if HWY_TARGET == HWY_AVX3_DL
  // The EVEX (AVX512_VNNI) encoding, which AVX3_DL CPUs have; GCC would pick the VEX (AVX-VNNI) one, which
  // Ice Lake lacks, since Highway 1.0.3's AVX3_DL target string names avxvnni.
  __m256i acc = _mm256_setzero_si256();
  asm("%{evex%} vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(x));
  return acc;
#else
  // Pairs of u8 * int8 stay within int16: |2 * 128 * 127| < 32768 (codes are <= 128 after abs).
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
#endif
}

#if TQ_Q8_512
inline __m512i DotQuads512(__m512i w, __m512i x) {
#if HWY_TARGET == HWY_AVX3_DL
  return _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, x);
#else
  return _mm512_madd_epi16(_mm512_maddubs_epi16(w, x), _mm512_set1_epi16(1));
#endif
}
#endif

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

#if TQ_Q8_X86
// The steps Tile and DirectTile share, so that both sum a row in one order (their results must be bit for bit
// equal, DirectTile's comment). w: the block's codes, wa: |w| for Q8_0 (kSigned) or w, xq: the token's codes,
// vd: the weight scale per lane, xd: the token's block scale per lane.
#if TQ_Q8_512
// Two blocks in a 512-bit vector.
template <bool kSigned>
inline __m512 PairStep(__m512i w, __m512i wa, __m512 vd, __m512i xq, __m512 xd, __m512 acc) {
  if constexpr (kSigned) xq = _mm512_mask_sub_epi8(xq, _mm512_movepi8_mask(w), _mm512_setzero_si512(), xq);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(DotQuads512(wa, xq)), _mm512_mul_ps(vd, xd), acc);
}
#endif

// One block in a 256-bit vector.
template <bool kSigned>
inline __m256 BlockStep(__m256i w, __m256i wa, __m256 vd, __m256i xq, __m256 xd, __m256 acc) {
  const __m256i xs = kSigned ? _mm256_sign_epi8(xq, w) : xq;
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(DotQuads(wa, xs)), _mm256_mul_ps(vd, xd), acc);
}

// The lanes of half-blocks [i, n) of a tail shorter than 8: past n both operands are +0.
inline __m256i MinTailMask(int64_t n, int64_t i) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - i)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#endif

// out[r][t] = panel row r . activation record t, for r < kR, t < kT.
// kSigned: codes are int8 (Q8_0), multiplied as |c| * (x with c's sign). kPer16: the two half-blocks of a block
// have their own scales (Q6_K). kMin: the type has min terms.
template <bool kSigned, bool kPer16, bool kMin, int kT>
void Tile(const uint8_t* panel, int64_t cols, const uint8_t* acts, int64_t stride, float out[kR][kTMax]) {
  const int64_t nb = cols / 32, prow = PanelRowBytes(cols);
  const float* dx[kT];
  for (int t = 0; t < kT; ++t) dx[t] = reinterpret_cast<const float*>(acts + t * stride + cols);
#if TQ_Q8_X86
  __m256 acc[kR][kT];
  int64_t b = 0;
#if TQ_Q8_512
  {  // Pairs of blocks in 512-bit vectors; lanes 0-3 / 4-7 are the halves of block b, 8-11 / 12-15 of b + 1.
    const __m512i half_index = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i block_index = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    __m512 acc2[kR][kT];
    for (int r = 0; r < kR; ++r) {
      for (int t = 0; t < kT; ++t) acc2[r][t] = _mm512_setzero_ps();
    }
    for (; b + 2 <= nb; b += 2) {
      __m512i xq[kT];
      __m512 xd[kT];
      for (int t = 0; t < kT; ++t) {
        xq[t] = _mm512_loadu_si512(acts + t * stride + 32 * b);
        const __m128 d2 = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(dx[t] + b)));
        xd[t] = _mm512_permutexvar_ps(block_index, _mm512_castps128_ps512(d2));
      }
      for (int r = 0; r < kR; ++r) {
        const uint8_t* pr = panel + r * prow;
        const __m512i w = _mm512_loadu_si512(pr + 32 * b);
        const __m128 sc4 = _mm_loadu_ps(reinterpret_cast<const float*>(pr + cols) + 2 * b);
        const __m512 sv = _mm512_permutexvar_ps(half_index, _mm512_castps128_ps512(sc4));
        const __m512i wa = kSigned ? _mm512_abs_epi8(w) : w;
        for (int t = 0; t < kT; ++t) acc2[r][t] = PairStep<kSigned>(w, wa, sv, xq[t], xd[t], acc2[r][t]);
      }
    }
    for (int r = 0; r < kR; ++r) {
      for (int t = 0; t < kT; ++t) {
        acc[r][t] = _mm256_add_ps(_mm512_castps512_ps256(acc2[r][t]), _mm512_extractf32x8_ps(acc2[r][t], 1));
      }
    }
  }
#else
  for (int r = 0; r < kR; ++r) {
    for (int t = 0; t < kT; ++t) acc[r][t] = _mm256_setzero_ps();
  }
#endif
  for (; b < nb; ++b) {
    __m256i xq[kT];
    __m256 xd[kT];
    for (int t = 0; t < kT; ++t) {
      xq[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(acts + t * stride + 32 * b));
      xd[t] = _mm256_broadcast_ss(dx[t] + b);
    }
    for (int r = 0; r < kR; ++r) {
      const uint8_t* pr = panel + r * prow;
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pr + 32 * b));
      const float* sc = reinterpret_cast<const float*>(pr + cols) + 2 * b;
      __m256 sv;
      if constexpr (kPer16) {
        sv = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_broadcast_ss(sc)), _mm_broadcast_ss(sc + 1), 1);
      } else {
        sv = _mm256_broadcast_ss(sc);
      }
      const __m256i wa = kSigned ? _mm256_sign_epi8(w, w) : w;
      for (int t = 0; t < kT; ++t) acc[r][t] = BlockStep<kSigned>(w, wa, sv, xq[t], xd[t], acc[r][t]);
    }
  }
  if constexpr (kMin) {  // add the min terms lane-wise, so that one horizontal sum per output remains
    const int64_t n = 2 * nb;
    const __m256i tail_mask = MinTailMask(n, n / 8 * 8);
    for (int r = 0; r < kR; ++r) {
      const float* mn = reinterpret_cast<const float*>(panel + r * prow + cols) + n;
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) {
        const __m256 m = _mm256_loadu_ps(mn + i);
        for (int t = 0; t < kT; ++t) acc[r][t] = _mm256_fmadd_ps(m, _mm256_loadu_ps(dx[t] + nb + i), acc[r][t]);
      }
      if (i < n) {
        const __m256 m = _mm256_maskload_ps(mn + i, tail_mask);
        for (int t = 0; t < kT; ++t) {
          acc[r][t] = _mm256_fmadd_ps(m, _mm256_maskload_ps(dx[t] + nb + i, tail_mask), acc[r][t]);
        }
      }
    }
  }
  for (int r = 0; r < kR; ++r) {
    for (int t = 0; t < kT; ++t) out[r][t] = HorizontalSum(acc[r][t]);
  }
#else
  for (int r = 0; r < kR; ++r) {
    const uint8_t* pr = panel + r * prow;
    const float* sc = reinterpret_cast<const float*>(pr + cols);
    for (int t = 0; t < kT; ++t) {
      const auto* xq = reinterpret_cast<const int8_t*>(acts + t * stride);
      float sum = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t half[2] = {0, 0};
        for (int i = 0; i < 32; ++i) {
          const int32_t c = kSigned ? static_cast<int8_t>(pr[32 * b + i]) : pr[32 * b + i];
          half[i / 16] += c * xq[32 * b + i];
        }
        sum += dx[t][b] * (sc[2 * b] * static_cast<float>(half[0]) + sc[2 * b + 1] * static_cast<float>(half[1]));
      }
      out[r][t] = sum;
    }
  }
  if constexpr (kMin) {
    for (int r = 0; r < kR; ++r) {
      const float* mn = reinterpret_cast<const float*>(panel + r * prow + cols) + 2 * nb;
      for (int t = 0; t < kT; ++t) out[r][t] += MinTerm(mn, dx[t] + nb, 2 * nb);
    }
  }
#endif
}

#if TQ_Q8_X86
// Direct tiles read their rows one after the other, each from start to end, so that a thread's whole row range
// is one sequential stream, and ask for the bytes kStreamAhead past the block they read (a steady trickle of
// prefetches). Rows interleaved per block (four short streams the hardware prefetcher does not train on) with
// one burst of prefetches per tile read Q6_K from DRAM at about 10 GB/s a thread against 16-19 GB/s this way
// (bench_matmul MatMulStream).
constexpr int64_t kStreamAhead = 4096;  // 4 to 16 KiB measured the same

// Asks for the cache lines of [p, p + n); p may lie past the matrix (a prefetch never faults).
inline void PrefetchLines(const uint8_t* p, int64_t n) {
  const auto first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
  for (uintptr_t line = first; line < reinterpret_cast<uintptr_t>(p + n); line += 64) {
    hwy::Prefetch(reinterpret_cast<const uint8_t*>(line));
  }
}

// Direct tiles for the types with blocks of 32 (Q8_0, Q4_0, Q4_1, Q5_0): codes and scales come straight from the
// weight rows, unpacked in registers, with no panel. w[r] is row r of the tile.
//
// Each output is the panel tile's (Tile) float arithmetic on the same values in the same order: on AVX-512 pairs
// of blocks in one 512-bit accumulator whose halves are added at the end, an odd last block in 256 bits, then
// the min terms lane-wise per 8 half-blocks, then HorizontalSum. The integer dots are exact either way, so a
// row's result is bit for bit the same through either tile, whatever the batch (MatMulTest.DirectAndPanelTiles
// AgreeBitwise). The K-quant direct tiles (matmul_q8_direct_k-inl.h) keep the same promise.
template <WeightType kType>
inline __m256i BlockCodes(const uint8_t* blk) {
  if constexpr (kType == WeightType::kQ8_0) return Load32(blk + 2);
  if constexpr (kType == WeightType::kQ5_0) return _mm256_or_si256(Nibbles(blk + 6), FifthBits(LoadU32(blk + 2)));
  if constexpr (kType == WeightType::kQ4_1) return Nibbles(blk + 4);
  return Nibbles(blk + 2);  // Q4_0
}

// The panel's min terms (DecodePanelRow's mn) of half-blocks 2 b0 .. 2 b0 + 7, i.e. of blocks b0 .. b0 + 3 (each
// twice), in 8 lanes; lanes of blocks at or past nb are 0 (and their bytes are not read).
template <WeightType kType>
inline __m256 HalfBlockMins(const uint8_t* row, int64_t b0, int64_t nb, int64_t block_bytes) {
  constexpr int kOffset = kType == WeightType::kQ4_1 ? 2 : 0;  // Q4_1: m; Q4_0, Q5_0: d
  // Built in registers: four 2-byte stores and a 16-byte load would stall on store forwarding.
  const auto half = [&](int k) -> int16_t {
    return b0 + k < nb ? static_cast<int16_t>(LoadU16(row + (b0 + k) * block_bytes + kOffset)) : int16_t{0};
  };
  __m128 v = _mm_cvtph_ps(_mm_setr_epi16(half(0), half(1), half(2), half(3), 0, 0, 0, 0));
  if constexpr (kType == WeightType::kQ4_0) v = _mm_mul_ps(_mm_set1_ps(-8.0f), v);
  if constexpr (kType == WeightType::kQ5_0) v = _mm_mul_ps(_mm_set1_ps(-16.0f), v);
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
}

template <WeightType kType, int kT>
void DirectTile(const uint8_t* const* w, int64_t cols, const uint8_t* acts, int64_t stride, float out[kR][kTMax]) {
  constexpr bool kSigned = kType == WeightType::kQ8_0;
  constexpr bool kMin = !kSigned;
  constexpr int64_t kBlockBytes = kType == WeightType::kQ8_0   ? 34
                                  : kType == WeightType::kQ4_0 ? 18
                                  : kType == WeightType::kQ5_0 ? 22
                                                               : 20;
  // One prefetch per two blocks where two span less than a cache line (so every line still gets one).
  constexpr int64_t kPrefetchEvery = 2 * kBlockBytes < 64 ? 2 : 1;
  const int64_t nb = cols / 32;
  const float* dx[kT];
  for (int t = 0; t < kT; ++t) dx[t] = reinterpret_cast<const float*>(acts + t * stride + cols);
  for (int r = 0; r < kR; ++r) {
    __m256 acc[kT];
    int64_t b = 0;
#if TQ_Q8_512
    {
      const __m512i block_index = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
      __m512 acc2[kT];
      for (int t = 0; t < kT; ++t) acc2[t] = _mm512_setzero_ps();
      for (; b + 2 <= nb; b += 2) {
        const uint8_t* blk = w[r] + b * kBlockBytes;
        hwy::Prefetch(blk + kStreamAhead);
        if constexpr (kPrefetchEvery == 1) hwy::Prefetch(blk + kBlockBytes + kStreamAhead);
        const __m512i c = _mm512_inserti64x4(_mm512_castsi256_si512(BlockCodes<kType>(blk)),
                                             BlockCodes<kType>(blk + kBlockBytes), 1);
        const __m512 sv = _mm512_insertf32x8(_mm512_castps256_ps512(BroadcastF16(blk)),
                                             BroadcastF16(blk + kBlockBytes), 1);
        const __m512i ca = kSigned ? _mm512_abs_epi8(c) : c;
        for (int t = 0; t < kT; ++t) {
          const __m128 d2 = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(dx[t] + b)));
          const __m512 xd = _mm512_permutexvar_ps(block_index, _mm512_castps128_ps512(d2));
          acc2[t] = PairStep<kSigned>(c, ca, sv, _mm512_loadu_si512(acts + t * stride + 32 * b), xd, acc2[t]);
        }
      }
      for (int t = 0; t < kT; ++t) {
        acc[t] = _mm256_add_ps(_mm512_castps512_ps256(acc2[t]), _mm512_extractf32x8_ps(acc2[t], 1));
      }
    }
#else
    for (int t = 0; t < kT; ++t) acc[t] = _mm256_setzero_ps();
#endif
    for (; b < nb; ++b) {
      const uint8_t* blk = w[r] + b * kBlockBytes;
      if (b % kPrefetchEvery == 0) hwy::Prefetch(blk + kStreamAhead);
      const __m256i c = BlockCodes<kType>(blk);
      const __m256 vd = BroadcastF16(blk);
      const __m256i ca = kSigned ? _mm256_sign_epi8(c, c) : c;
      for (int t = 0; t < kT; ++t) {
        acc[t] = BlockStep<kSigned>(c, ca, vd, Load32(acts + t * stride + 32 * b), _mm256_broadcast_ss(dx[t] + b),
                                    acc[t]);
      }
    }
    if constexpr (kMin) {  // as Tile: the min of half-blocks i..i+7 times the token's half-block sums
      const int64_t n = 2 * nb;
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) {
        const __m256 m = HalfBlockMins<kType>(w[r], i / 2, nb, kBlockBytes);
        for (int t = 0; t < kT; ++t) acc[t] = _mm256_fmadd_ps(m, _mm256_loadu_ps(dx[t] + nb + i), acc[t]);
      }
      if (i < n) {  // Tile's masked tail: the lanes past n are 0 in both operands
        const __m256i tail_mask = MinTailMask(n, i);
        // +0 past the end, as Tile's masked load gives (Q4_0's -8 * 0 would be -0).
        const __m256 m = _mm256_and_ps(HalfBlockMins<kType>(w[r], i / 2, nb, kBlockBytes),
                                       _mm256_castsi256_ps(tail_mask));
        for (int t = 0; t < kT; ++t) {
          acc[t] = _mm256_fmadd_ps(m, _mm256_maskload_ps(dx[t] + nb + i, tail_mask), acc[t]);
        }
      }
    }
    for (int t = 0; t < kT; ++t) out[r][t] = HorizontalSum(acc[t]);
  }
}

#include "kernels/cpu/matmul_q8_direct_k-inl.h"  // DirectTileQ4K, DirectTileQ6K (AVX-512 and AVX2 targets)
#include "kernels/cpu/matmul_q8_panel_k-inl.h"   // DecodePanelRowK, TileK (AVX-512 targets)

// Whether the target has direct tiles for `type`.
constexpr bool HasDirectTile(WeightType type) {
  return type == WeightType::kQ8_0 || type == WeightType::kQ4_0 || type == WeightType::kQ4_1 ||
         type == WeightType::kQ5_0 || type == WeightType::kQ4_K || type == WeightType::kQ6_K;
}

template <WeightType kType, int kT>
void AnyDirectTile(const uint8_t* const* w, int64_t cols, const uint8_t* acts, int64_t stride, float out[kR][kTMax]) {
  if constexpr (kType == WeightType::kQ4_K) {
    DirectTileQ4K<kT>(w, cols, acts, stride, out);
  } else if constexpr (kType == WeightType::kQ6_K) {
    DirectTileQ6K<kT>(w, cols, acts, stride, out);
  } else {
    DirectTile<kType, kT>(w, cols, acts, stride, out);
  }
}

// The largest batch the direct tiles take; beyond it the panel tiles win (they unpack once per token block).
// bench_matmul MatMulRows/TYPE/8, GMAC/s a thread (AVX-512, in cache), direct against panel: Q4_K 62.5 / 51.9,
// Q6_K 44.6 / 50.8, Q8_0 40.9 / 42.2, Q4_0 35.4 / 46.5, Q4_1 35.1 / 46.4, Q5_0 34.1 / 43.0. From DRAM (a server's
// decode step of 5-8 sequences) the direct tiles stream better: `bench_model_speed L1B 2 64 32 1 f16 8` on the
// Llama-3.2-1B shape (Q4_K and Q6_K) 53.8 tok/s with both panel, 64.5-66.2 with Q4_K direct, 68.7-72.2 with both;
// SmolLM2 (Q4_1) 332-381 with the panel, 258-291 direct.
constexpr int64_t DirectMaxBatch(WeightType type) {
  return (type == WeightType::kQ4_K || type == WeightType::kQ6_K) && TQ_Q8_512 ? 8 : 4;
}

template <WeightType kType>
void RunDirect(const MatMulArgs& a, const uint8_t* acts, int64_t row_begin, int64_t row_end) {
  const int64_t stride = Q8ActivationStride(a.cols);
  float out[kR][kTMax];
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kR) {
    const int n = static_cast<int>(std::min<int64_t>(kR, row_end - r0));
    const uint8_t* w[kR];
    for (int r = 0; r < kR; ++r) w[r] = a.w + (r0 + (r < n ? r : 0)) * a.row_bytes;  // padding: row 0 again
    for (int64_t b0 = 0; b0 < a.batch; b0 += kTMax) {
      const int nt = static_cast<int>(std::min<int64_t>(kTMax, a.batch - b0));
      const uint8_t* at = acts + b0 * stride;
      switch (nt) {
        case 1: AnyDirectTile<kType, 1>(w, a.cols, at, stride, out); break;
        case 2: AnyDirectTile<kType, 2>(w, a.cols, at, stride, out); break;
        case 3: if constexpr (kTMax >= 3) AnyDirectTile<kType, 3>(w, a.cols, at, stride, out); break;
        default: if constexpr (kTMax >= 4) AnyDirectTile<kType, 4>(w, a.cols, at, stride, out); break;
      }
      for (int t = 0; t < nt; ++t) {
        float* yt = a.y + (b0 + t) * a.y_stride + r0;
        for (int r = 0; r < n; ++r) yt[r] = out[r][t];
      }
    }
  }
}
#endif

template <bool kSigned, bool kPer16, bool kMin>
void RunRows(const MatMulArgs& a, const uint8_t* acts, int64_t row_begin, int64_t row_end, uint8_t* panel) {
  const int64_t stride = Q8ActivationStride(a.cols), prow = PanelRowBytes(a.cols);
  const int64_t token_block = TokenBlock(stride);
  float out[kR][kTMax];
  // Blocks of tokens whose activations stay in L2 while every row tile of the range passes over them.
  for (int64_t tb = 0; tb < a.batch; tb += token_block) {
    const int64_t tb_end = std::min(a.batch, tb + token_block);
    for (int64_t r0 = row_begin; r0 < row_end; r0 += kR) {
      const int n = static_cast<int>(std::min<int64_t>(kR, row_end - r0));
      PrefetchAhead(a.w + r0 * a.row_bytes, kR * a.row_bytes, a.w + row_end * a.row_bytes);
      for (int r = 0; r < n; ++r) DecodePanelRow(a.type, a.w + (r0 + r) * a.row_bytes, a.cols, panel + r * prow);
      // Rows past the range are zero (zero codes, scales and mins): their outputs are discarded.
      if (n < kR) std::memset(panel + n * prow, 0, static_cast<size_t>((kR - n) * prow));
      for (int64_t b0 = tb; b0 < tb_end; b0 += kTMax) {
        const int nt = static_cast<int>(std::min<int64_t>(kTMax, tb_end - b0));
        const uint8_t* at = acts + b0 * stride;
        switch (nt) {
          case 1: Tile<kSigned, kPer16, kMin, 1>(panel, a.cols, at, stride, out); break;
          case 2: Tile<kSigned, kPer16, kMin, 2>(panel, a.cols, at, stride, out); break;
          case 3: if constexpr (kTMax >= 3) Tile<kSigned, kPer16, kMin, 3>(panel, a.cols, at, stride, out); break;
          default: if constexpr (kTMax >= 4) Tile<kSigned, kPer16, kMin, 4>(panel, a.cols, at, stride, out); break;
        }
        for (int t = 0; t < nt; ++t) {
          float* yt = a.y + (b0 + t) * a.y_stride + r0;
          for (int r = 0; r < n; ++r) yt[r] = out[r][t];
        }
      }
    }
  }
}

#if TQ_Q8_512
// RunRows for the K-quants with integer super-block sums (matmul_q8_panel_k-inl.h).
void RunRowsK(const MatMulArgs& a, const uint8_t* acts, int64_t row_begin, int64_t row_end, uint8_t* panel) {
  const int64_t stride = Q8ActivationStride(a.cols), prow = KPanelRowBytes(a.cols);
  const int64_t token_block = TokenBlock(stride);
  float out[kR][kTMax];
  for (int64_t tb = 0; tb < a.batch; tb += token_block) {
    const int64_t tb_end = std::min(a.batch, tb + token_block);
    for (int64_t r0 = row_begin; r0 < row_end; r0 += kR) {
      const int n = static_cast<int>(std::min<int64_t>(kR, row_end - r0));
      PrefetchAhead(a.w + r0 * a.row_bytes, kR * a.row_bytes, a.w + row_end * a.row_bytes);
      for (int r = 0; r < n; ++r) DecodePanelRowK(a.type, a.w + (r0 + r) * a.row_bytes, a.cols, panel + r * prow);
      if (n < kR) std::memset(panel + n * prow, 0, static_cast<size_t>((kR - n) * prow));
      for (int64_t b0 = tb; b0 < tb_end; b0 += kTMax) {
        const int nt = static_cast<int>(std::min<int64_t>(kTMax, tb_end - b0));
        const uint8_t* at = acts + b0 * stride;
        switch (nt) {
          case 1: TileK<1>(panel, a.cols, at, stride, out); break;
          case 2: TileK<2>(panel, a.cols, at, stride, out); break;
          case 3: TileK<3>(panel, a.cols, at, stride, out); break;
          default: TileK<4>(panel, a.cols, at, stride, out); break;
        }
        for (int t = 0; t < nt; ++t) {
          float* yt = a.y + (b0 + t) * a.y_stride + r0;
          for (int r = 0; r < n; ++r) yt[r] = out[r][t];
        }
      }
    }
  }
}
#endif

void MatMulRowsImpl(const MatMulArgs& a, const uint8_t* acts, int64_t row_begin, int64_t row_end,
                    uint8_t* scratch) {
#if TQ_Q8_X86
  // Small batches (decode): unpack in registers; larger ones: unpack once into the panel, reused by all tokens.
  // Both give a row the same bits, so a token's result does not depend on its batch.
  if (a.batch <= DirectMaxBatch(a.type)) {
    switch (a.type) {
      case WeightType::kQ8_0: RunDirect<WeightType::kQ8_0>(a, acts, row_begin, row_end); return;
      case WeightType::kQ4_0: RunDirect<WeightType::kQ4_0>(a, acts, row_begin, row_end); return;
      case WeightType::kQ4_1: RunDirect<WeightType::kQ4_1>(a, acts, row_begin, row_end); return;
      case WeightType::kQ5_0: RunDirect<WeightType::kQ5_0>(a, acts, row_begin, row_end); return;
      case WeightType::kQ4_K:
        if constexpr (HasDirectTile(WeightType::kQ4_K)) {
          RunDirect<WeightType::kQ4_K>(a, acts, row_begin, row_end);
          return;
        }
        break;
      case WeightType::kQ6_K:
        if constexpr (HasDirectTile(WeightType::kQ6_K)) {
          RunDirect<WeightType::kQ6_K>(a, acts, row_begin, row_end);
          return;
        }
        break;
      default: break;
    }
  }
#endif
#if TQ_Q8_512
  if (a.type == WeightType::kQ4_K || a.type == WeightType::kQ5_K || a.type == WeightType::kQ6_K) {
    RunRowsK(a, acts, row_begin, row_end, scratch);
    return;
  }
#endif
  switch (a.type) {
    case WeightType::kQ8_0: RunRows<true, false, false>(a, acts, row_begin, row_end, scratch); return;
    case WeightType::kQ6_K: RunRows<false, true, true>(a, acts, row_begin, row_end, scratch); return;
    default: RunRows<false, false, true>(a, acts, row_begin, row_end, scratch); return;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tq::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tq::kernels {

HWY_EXPORT(QuantizeRows);
HWY_EXPORT(MatMulRowsImpl);

bool IsQ8PathType(WeightType type) {
  switch (type) {
    case WeightType::kQ8_0: case WeightType::kQ4_0: case WeightType::kQ4_1: case WeightType::kQ5_0:
    case WeightType::kQ4_K: case WeightType::kQ5_K: case WeightType::kQ6_K:
      return true;
    default:
      return false;
  }
}

int64_t Q8ActivationStride(int64_t cols) { return (cols + (cols / 32) * 16 + 63) / 64 * 64; }

int64_t Q8ScratchBytes(int64_t cols) { return q8::kR * std::max(q8::PanelRowBytes(cols), q8::KPanelRowBytes(cols)); }

void QuantizeActivationsQ8(const float* x, int64_t cols, int64_t b_begin, int64_t b_end, uint8_t* acts) {
  HWY_DYNAMIC_DISPATCH(QuantizeRows)(x, cols, b_begin, b_end, acts);
}

void MatMulRowsQ8(const MatMulArgs& args, const uint8_t* acts, int64_t row_begin, int64_t row_end,
                  uint8_t* scratch) {
  HWY_DYNAMIC_DISPATCH(MatMulRowsImpl)(args, acts, row_begin, row_end, scratch);
}

}  // namespace tq::kernels
#endif
