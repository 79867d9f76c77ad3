// SIMD attention on KV pages (Highway, compiled for every target in HWY_TARGETS; the best one the CPU
// supports is chosen once per call by HWY_DYNAMIC_DISPATCH). Same math as attention_ref.cc, fp32
// accumulation.
//
// Codes are decoded 16 tokens at a time: one load of a 16-byte row (one byte per token), shifts, and an
// in-register table lookup (AVX-512: vpermps over a 16-entry centroid table; AVX2: 4-bit codes by two byte
// shuffles of the table's fp32 bytes 2 and 3 (bfloat16-exact tables) per 32 codes and in-lane unpacks, other
// widths by two vpermps and a blend; other targets: a gather). Scores accumulate per token group in registers
// (group-outer loop); values accumulate per coordinate in lane-wise registers over all groups of a page
// (coordinate-outer loop) and are reduced across lanes once per call.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/attention/plan.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention/attention_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/cache_control.h>
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tq::kernels::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using attention_internal::Plan;
using attention_internal::PlannedPage;

using DF = hn::CappedTag<float, kGroupTokens>;
using DI = hn::RebindToSigned<DF>;
using DU8 = hn::Rebind<uint8_t, DI>;
using DI8 = hn::Rebind<int8_t, DI>;
using DH = hn::Rebind<hwy::float16_t, DF>;
using VF = hn::Vec<DF>;
using VI = hn::Vec<DI>;

constexpr size_t kN = hn::MaxLanes(DF());        // lanes per vector: 16 (AVX-512), 8 (AVX2), 4 (SSE4)
constexpr size_t kBlocks = kGroupTokens / kN;    // vectors per 16-token group
constexpr int kMaxChunk = 4;                     // query heads processed together

// A code table ready for in-register lookups: 16 floats (codebooks of < 16 entries replicated so that index bits
// above the code width do not matter), or the 256-entry table of 8-bit codes.
struct Lut {
  alignas(64) float table16[16];
  const float* table256 = nullptr;
  VF lo, hi;  // table16[0..kN) and table16[kN..2kN) where they fit in registers
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
  // Bytes 2 and 3 of the 16 entries as fp32, in both 128-bit lanes; used where bf16_exact (bytes 0 and 1 are
  // zero, as in Codebook's 4-bit tables).
  __m256i bf_lo, bf_hi;
  bool bf16_exact = false;
#endif
};

Lut MakeLut(const std::vector<float>& table) {
  Lut lut;
  const size_t size = table.size();
  assert(size >= 2 && (size & (size - 1)) == 0);  // 2^bits entries
  // Replicated to 16 entries (i & (size - 1), not i % size: an integer division per entry cost 10% of tq3 decode
  // attention, since a Lut is built per segment and page).
  for (size_t i = 0; i < 16; ++i) lut.table16[i] = table[i & (size - 1)];
  if (size == 256) lut.table256 = table.data();
  const DF df;
  lut.lo = hn::LoadU(df, lut.table16);
  lut.hi = kN < 16 ? hn::LoadU(df, lut.table16 + kN) : lut.lo;
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
  alignas(16) uint8_t bf[2][16];
  lut.bf16_exact = true;
  for (size_t i = 0; i < 16; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &lut.table16[i], sizeof bits);
    lut.bf16_exact = lut.bf16_exact && (bits & 0xFFFF) == 0;
    bf[0][i] = static_cast<uint8_t>(bits >> 16);
    bf[1][i] = static_cast<uint8_t>(bits >> 24);
  }
  lut.bf_lo = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(bf[0])));
  lut.bf_hi = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(bf[1])));
#endif
  return lut;
}

// The Luts of the code tables seen in one RunChunk call (its pages share a few codecs), built once each
// rather than per page and segment (MakeLut was 2.5% of tq4 decode attention). Tables are keyed by address: a
// codec's tables live as long as the codec, which outlives the call.
class LutCache {
 public:
  const Lut& Get(const std::vector<float>& table) {
    for (int i = 0; i < used_; ++i) {
      if (key_[i] == table.data()) return lut_[i];
    }
    const int i = used_ < kSlots ? used_++ : kSlots - 1;  // past kSlots tables the last slot is rebuilt
    key_[i] = table.data();
    lut_[i] = MakeLut(table);
    return lut_[i];
  }

 private:
  static constexpr int kSlots = 8;
  const float* key_[kSlots] = {};
  Lut lut_[kSlots];
  int used_ = 0;
};

// table[idx] per lane, idx's low kBits bits (higher bits ignored; kBits == 8: idx in [0, 256)).
template <int kBits>
HWY_INLINE VF Lookup(const Lut& lut, VI idx) {
  const DF df;
  if constexpr (kBits == 8) {
    return hn::GatherIndex(df, lut.table256, idx);
  } else {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    return VF{_mm512_permutexvar_ps(idx.raw, lut.lo.raw)};
#elif HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
    const __m256 lo = _mm256_permutevar8x32_ps(lut.lo.raw, idx.raw);
    if constexpr (kBits <= 3) {
      return VF{lo};
    } else {
      const __m256 hi = _mm256_permutevar8x32_ps(lut.hi.raw, idx.raw);
      return VF{_mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(idx.raw, 28)))};
    }
#else
    return hn::GatherIndex(df, lut.table16, hn::And(idx, hn::Set(DI(), 15)));
#endif
  }
}

HWY_INLINE VI LoadBytes(const uint8_t* p) { return hn::PromoteTo(DI(), hn::LoadU(DU8(), p)); }

// The bytes (norms and codes) of the next page, asked for a few cache lines at a time over the work of this one:
// a page's lines asked for at once (70 for a tq4 K page, 256 for f16) fill the core's miss buffers and stall it
// on the prefetch instructions themselves.
struct PagePrefetch {
  const uint8_t* next = nullptr;
  const uint8_t* end = nullptr;
  size_t lines_per_step = 0;

  // [begin, begin + bytes) over about `steps` calls of Step.
  void Start(const uint8_t* begin, size_t bytes, int steps) {
    next = begin;
    end = begin + bytes;
    const size_t lines = (bytes + 63) / 64;
    lines_per_step = (lines + std::max(steps, 1) - 1) / std::max(steps, 1);
  }
  HWY_INLINE void Step() {
    for (size_t i = 0; i < lines_per_step && next < end; ++i, next += 64) hwy::Prefetch(next);
  }
  void Finish() {
    for (; next < end; next += 64) hwy::Prefetch(next);
  }
};

#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
HWY_INLINE __m128i LoadRow(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

// AVX2 lookups of 4-bit codes (kShuffleLookup, tables bf16_exact), for the value pass: the unit row of a
// group (16 bytes, one per token: coordinate 0 in bits 0-3, coordinate 1 in bits 4-7) is loaded into both
// 128-bit lanes, coordinate 0's indices kept in the low lane and coordinate 1's in the high one; two byte
// shuffles give fp32 bytes 2 and 3 of all 32 entries, placed over two zero bytes by in-lane unpacks. Neither
// a conversion nor a lane-crossing operation: on Zen 3 this decode beside the pass's 12 FMAs took 2.7-2.8 ns
// per unit and group where binary16 entries and vcvtph2ps took 3.6-3.8 (bench_decode_ports, BM_Bf16Unit vs
// BM_Tq4Unit). m[k] = [coordinate 0 | coordinate 1] of tokens [4k, 4k + 4) of the group.
HWY_INLINE void DecodeUnit4Quads(const Lut& lut, const uint8_t* row, __m256 m[4]) {
  const __m256i r = _mm256_broadcastsi128_si256(LoadRow(row));
  const __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(r, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
                                       _mm256_set1_epi8(0x0F));
  const __m256i b2 = _mm256_shuffle_epi8(lut.bf_lo, idx);
  const __m256i b3 = _mm256_shuffle_epi8(lut.bf_hi, idx);
  const __m256i h0 = _mm256_unpacklo_epi8(b2, b3);  // top halves of tokens 0-7, per lane
  const __m256i h1 = _mm256_unpackhi_epi8(b2, b3);  // tokens 8-15
  const __m256i z = _mm256_setzero_si256();
  m[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, h0));
  m[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, h0));
  m[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, h1));
  m[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, h1));
}

// The score pass's form of DecodeUnit4Quads: each lane keeps one coordinate, so a token's products stay in
// one lane. The row's bytes 0-7 go to the low lane and 8-15 to the high one, each twice (low nibbles, then
// high). m[c][0] = coordinate c of tokens [0, 4) and [8, 12), m[c][1] = of tokens [4, 8) and [12, 16).
HWY_INLINE void DecodeUnit4Split(const Lut& lut, const uint8_t* row, __m256 m[2][2]) {
  const __m128i lo = _mm_castpd_si128(_mm_loaddup_pd(reinterpret_cast<const double*>(row)));
  const __m128i hi = _mm_castpd_si128(_mm_loaddup_pd(reinterpret_cast<const double*>(row + 8)));
  const __m256i r = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
  const __m256i idx =
      _mm256_and_si256(_mm256_srlv_epi64(r, _mm256_setr_epi64x(0, 4, 0, 4)), _mm256_set1_epi8(0x0F));
  const __m256i b2 = _mm256_shuffle_epi8(lut.bf_lo, idx);
  const __m256i b3 = _mm256_shuffle_epi8(lut.bf_hi, idx);
  const __m256i h0 = _mm256_unpacklo_epi8(b2, b3);  // coordinate 0: tokens 0-7 | 8-15
  const __m256i h1 = _mm256_unpackhi_epi8(b2, b3);  // coordinate 1
  const __m256i z = _mm256_setzero_si256();
  m[0][0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, h0));
  m[0][1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, h0));
  m[1][0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, h1));
  m[1][1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, h1));
}

// 4-bit codes only: the byte-shuffle lookup of 3-bit codes (indices put together from the two planes) measured
// no faster than one vpermps, and for 1- and 2-bit codes one vpermps is already less work.
template <int kBits>
constexpr bool kShuffleLookup = kBits == 4 && kBlocks == 2;
#else
template <int kBits>
constexpr bool kShuffleLookup = false;
#endif

// Coordinates per unit of a code width: the smallest run of coordinates whose rows are self-contained.
constexpr int UnitDimsOf(int bits) { return bits == 3 ? 8 : bits == 8 ? 2 : 8 / bits; }
template <int kBits>
constexpr int UnitDims() {
  return UnitDimsOf(kBits);
}

// Code indices of coordinate K of unit u for tokens [b * kN, b * kN + kN) of a group. `seg` points at the segment's
// rows in the group; `dims` is the segment's coordinate count (locates the 3-bit high plane).
template <int kBits, int K>
HWY_INLINE VI IndexAt(const uint8_t* seg, int dims, int u, size_t b) {
  const size_t lane = b * kN;
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
  if constexpr (kBits == 3 && kBlocks == 2) {
    // The index bytes of all 16 tokens put together in one 128-bit register (five byte-wide operations for
    // both blocks; the two calls for b = 0, 1 share them), then widened: 8 ymm operations fewer per 16
    // tokens.
    const __m128i lo = LoadRow(seg + static_cast<size_t>(2 * u + K / 4) * kGroupTokens);
    const __m128i hi = LoadRow(seg + static_cast<size_t>(dims / 4 + u) * kGroupTokens);
    const __m128i lo_k = _mm_and_si128(_mm_srli_epi16(lo, 2 * (K % 4)), _mm_set1_epi8(3));
    __m128i hi_k;  // the high plane's bit K moved to bit 2
    if constexpr (K >= 2) {
      hi_k = _mm_srli_epi16(hi, K - 2);
    } else {
      hi_k = _mm_slli_epi16(hi, 2 - K);
    }
    const __m128i idx = _mm_or_si128(lo_k, _mm_and_si128(hi_k, _mm_set1_epi8(4)));
    return VI{_mm256_cvtepu8_epi32(b == 0 ? idx : _mm_unpackhi_epi64(idx, idx))};
  }
#endif
  if constexpr (kBits == 3) {
    const VI lo = LoadBytes(seg + static_cast<size_t>(2 * u + K / 4) * kGroupTokens + lane);
    const VI hi = LoadBytes(seg + static_cast<size_t>(dims / 4 + u) * kGroupTokens + lane);
    const VI lo_k = hn::ShiftRight<2 * (K % 4)>(lo);
    VI hi_k;
    if constexpr (K >= 2) {
      hi_k = hn::ShiftRight<K - 2>(hi);
    } else {
      hi_k = hn::ShiftLeft<2 - K>(hi);
    }
    const VI low_bits = hn::Set(DI(), 3);
    return hn::Or(hn::And(low_bits, lo_k), hn::AndNot(low_bits, hi_k));  // bits 0-1 from lo, bit 2 the high bit
  } else if constexpr (kBits == 8) {
    return LoadBytes(seg + static_cast<size_t>(2 * u + K) * kGroupTokens + lane);
  } else {
    // K may pass the unit's end: coordinate K of unit u is coordinate K % UnitDims of unit u + K / UnitDims.
    constexpr int kDims = UnitDimsOf(kBits);
    const VI row = LoadBytes(seg + static_cast<size_t>(u + K / kDims) * kGroupTokens + lane);
    return hn::ShiftRight<(K % kDims) * kBits>(row);
  }
}

// Independent FMA chains matter more than anything else here (FMA latency 4 cycles, 2 per cycle): scores
// accumulate over coordinates with one chain per (query head, group of a pass); values accumulate over tokens
// with one chain per (query head, coordinate of a pass, group parity).
constexpr int kGroupsPerPass = kBlocks >= 4 ? 1 : static_cast<int>(4 / kBlocks);

// Vector registers of the target: 16 on AVX2 and SSE4, 32 on AVX-512; 16 assumed on other architectures.
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3
constexpr int kVectorRegs = 16;
#elif HWY_ARCH_X86
constexpr int kVectorRegs = 32;
#else
constexpr int kVectorRegs = 16;
#endif

// Token groups scored per pass by G query heads: up to kGroupsPerPass, fewer where the G * groups * kBlocks
// accumulators would not stay in registers beside the G broadcast queries, the code table (two registers) and
// three temporaries. Spilled accumulators put a store and a reload into every FMA chain (AVX2, G = 3: twelve
// accumulators, four spilled; sized this way tq3 decode attention went from 1.24-1.29x to 1.38-1.44x f16).
// With 16 registers (AVX2 has no embedded broadcast) the f16 and int8 scores read the query as FMA memory
// operands from a copy broadcast to [G][head_dim][kN] floats instead of holding G broadcast registers, which
// leaves room for two groups per pass (12 accumulators for G = 3, one FMA each per coordinate: the chains no
// longer wait on the FMA latency). The code paths keep broadcast registers: their lookups need the registers,
// and two groups per pass measured slower there.
constexpr bool kBroadcastQ = kVectorRegs == 16;

// p, as a value the compiler cannot see through: loads through it are not merged with earlier loads of the
// same address. Where FMA memory operands are meant (kBroadcastQ's queries, AccumulatePlain's weights),
// merged loads are held in registers, and the compiler then spills accumulators instead.
HWY_INLINE const float* Opaque(const float* p) {
  asm("" : "+r"(p));
  return p;
}

template <int G, bool kCodes>
constexpr int ScoreGroupsPerPass() {
  // Registers left for accumulators: less the broadcast queries (none for the plain rows with kBroadcastQ),
  // the code table (two registers) and three temporaries.
  constexpr int kFree = kVectorRegs - (kCodes ? G + 2 : (kBroadcastQ ? 0 : G)) - 3;
  int n = kGroupsPerPass;
  while (n > 1 && G * n * static_cast<int>(kBlocks) > kFree) n /= 2;
  return n;
}

// ---- Scores: acc[g][j][b] += sum_i q[g][i] * value_i(tokens of group grp0 + j), j < kGroups. ----

template <int G, int kGroups>
using ScoreAcc = VF[G][kGroups][kBlocks];

template <int kBits, int G, int kGroups, int K = 0>
HWY_INLINE void ScoreUnit(const uint8_t* seg, size_t group_bytes, int dims, int u, const Lut& lut,
                          const float* const* q, ScoreAcc<G, kGroups>& acc) {
  if constexpr (K < UnitDims<kBits>()) {
    const int i = u * UnitDims<kBits>() + K;
    VF qv[G];
    for (int g = 0; g < G; ++g) qv[g] = hn::Set(DF(), q[g][i]);
    for (int j = 0; j < kGroups; ++j) {
      for (size_t b = 0; b < kBlocks; ++b) {
        const VF val = Lookup<kBits>(lut, IndexAt<kBits, K>(seg + j * group_bytes, dims, u, b));
        for (int g = 0; g < G; ++g) acc[g][j][b] = hn::MulAdd(val, qv[g], acc[g][j][b]);
      }
    }
    ScoreUnit<kBits, G, kGroups, K + 1>(seg, group_bytes, dims, u, lut, q, acc);
  }
}

template <int kBits, int G, int kGroups>
HWY_INLINE void ScoreCodes(const uint8_t* seg, size_t group_bytes, int dims, const Lut& lut,
                           const float* const* q, ScoreAcc<G, kGroups>& acc, PagePrefetch& pf) {
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
  if constexpr (kShuffleLookup<kBits>) {
    if (lut.bf16_exact) {
      // DecodeUnit4Split: acc[g][j][0] sums tokens {0-3, 8-11} of group j, [1] tokens {4-7, 12-15}; put back
      // in token order once the segment's units are done.
      for (int u = 0; u < dims / 2; ++u) {
        pf.Step();
        for (int j = 0; j < kGroups; ++j) {
          __m256 m[2][2];
          DecodeUnit4Split(lut, seg + j * group_bytes + static_cast<size_t>(u) * kGroupTokens, m);
          for (int g = 0; g < G; ++g) {
            const VF q0 = hn::Set(DF(), q[g][2 * u]);
            const VF q1 = hn::Set(DF(), q[g][2 * u + 1]);
            for (int h = 0; h < 2; ++h) {
              acc[g][j][h] = hn::MulAdd(VF{m[0][h]}, q0, acc[g][j][h]);
              acc[g][j][h] = hn::MulAdd(VF{m[1][h]}, q1, acc[g][j][h]);
            }
          }
        }
      }
      for (int g = 0; g < G; ++g) {
        for (int j = 0; j < kGroups; ++j) {
          const __m256 a = acc[g][j][0].raw, b = acc[g][j][1].raw;
          acc[g][j][0] = VF{_mm256_permute2f128_ps(a, b, 0x20)};
          acc[g][j][1] = VF{_mm256_permute2f128_ps(a, b, 0x31)};
        }
      }
      return;
    }
  }
#endif
  for (int u = 0; u < dims / UnitDims<kBits>(); ++u) {
    pf.Step();
    ScoreUnit<kBits, G, kGroups>(seg, group_bytes, dims, u, lut, q, acc);
  }
}

// f16 (kHalf) or int8 rows: 16 values per coordinate and group. q[g]: the query from the segment's first
// coordinate on, broadcast ([dims][kN]) where kBroadcastQ.
template <int G, int kGroups, bool kHalf>
HWY_INLINE void ScorePlain(const uint8_t* seg, size_t group_bytes, int dims, const float* const* q,
                           ScoreAcc<G, kGroups>& acc, PagePrefetch& pf) {
  for (int i = 0; i < dims; ++i) {
    if (i % 4 == 0) pf.Step();
    VF qv[G];
    if constexpr (!kBroadcastQ) {
      for (int g = 0; g < G; ++g) qv[g] = hn::Set(DF(), q[g][i]);
    }
    for (int j = 0; j < kGroups; ++j) {
      const uint8_t* rows = seg + j * group_bytes;
      for (size_t b = 0; b < kBlocks; ++b) {
        VF val;
        if constexpr (kHalf) {
          const hwy::float16_t* h = reinterpret_cast<const hwy::float16_t*>(rows) + i * kGroupTokens + b * kN;
          val = hn::PromoteTo(DF(), hn::LoadU(DH(), h));
        } else {
          const int8_t* c = reinterpret_cast<const int8_t*>(rows) + i * kGroupTokens + b * kN;
          val = hn::ConvertTo(DF(), hn::PromoteTo(DI(), hn::LoadU(DI8(), c)));
        }
        for (int g = 0; g < G; ++g) {
          // kBroadcastQ: q[g] is the broadcast copy, [i][kN].
          const VF qg = kBroadcastQ ? hn::LoadU(DF(), Opaque(q[g]) + static_cast<size_t>(i) * kN) : qv[g];
          acc[g][j][b] = hn::MulAdd(val, qg, acc[g][j][b]);
        }
      }
    }
  }
}

// ---- Values: acc[g][i] (kN lanes) += sum over tokens of w[g][t] * value_i(t), for every coordinate i. ----

// The active groups of a page, in order (at most 8).
struct GroupList {
  int count = 0;
  int index[kPageTokens / kGroupTokens];
  explicit GroupList(unsigned mask) {
    for (; mask != 0; mask &= mask - 1) index[count++] = __builtin_ctz(mask);
  }
};

// Coordinates per value pass: with 32 registers (AVX-512) 4, which share the loads of the weights and of
// their code rows (the 3-bit rows hold 8 coordinates, 2-bit 4, 1-bit 8; a 4-bit pass spans two units, 8-bit
// two); otherwise 2 (at most one unit).
template <int kBits>
constexpr int PassDims() {
  return kN >= 16 ? 4 : std::min(UnitDims<kBits>(), 2);
}

// Units per value pass: the pass covers PassDims coordinates from unit u on.
template <int kBits>
constexpr int PassUnits() {
  return std::max(1, PassDims<kBits>() / UnitDims<kBits>());
}

// v[c] = the table values of coordinate K + c of unit u for tokens [b * kN, b * kN + kN) of a group, c < kP.
template <int kBits, int K, int kP, int C = 0>
HWY_INLINE void LookupPass(const Lut& lut, const uint8_t* seg, int dims, int u, size_t b, VF* v) {
  if constexpr (C < kP) {
    v[C] = Lookup<kBits>(lut, IndexAt<kBits, K + C>(seg, dims, u, b));
    LookupPass<kBits, K, kP, C + 1>(lut, seg, dims, u, b, v);
  }
}

// Coordinates [K, K + kP) of the kSpan coordinates from unit u on (kP = min(PassDims, kSpan)), over all
// active groups; one chain per (head, coordinate), or two by group parity when there are fewer than 8 chains
// (FMA latency). w: [G][kPageTokens] weights with norms folded in; acc: [G][head_dim][kN] at the segment's
// first coordinate.
template <int kBits, int G, int kSpan, int K = 0>
HWY_INLINE void AccumulateUnit(const uint8_t* codes, size_t group_bytes, size_t seg_offset, int dims, int u,
                               const GroupList& groups, const Lut& lut, const float* w, float* acc,
                               int head_dim) {
  if constexpr (K < kSpan) {
    constexpr int kP = std::min(PassDims<kBits>(), kSpan);
    // Two chains by group parity only where the doubled accumulators still fit in registers beside the code
    // table and about four temporaries (spilled accumulators put a store and a reload into every chain).
    constexpr int kPar = kP * G >= 8 || 2 * kP * G > kVectorRegs - 6 ? 1 : 2;
    const DF df;
    VF r[kPar][kP][G];  // [parity][coordinate][head]
    for (int par = 0; par < kPar; ++par) {
      for (int c = 0; c < kP; ++c) {
        for (int g = 0; g < G; ++g) r[par][c][g] = hn::Zero(df);
      }
    }
    auto step = [&](int par, int grp) HWY_ATTR {
      const uint8_t* seg = codes + grp * group_bytes + seg_offset;
      for (size_t b = 0; b < kBlocks; ++b) {
        VF v[kP];
        LookupPass<kBits, K, kP>(lut, seg, dims, u, b, v);
        const size_t t = static_cast<size_t>(grp) * kGroupTokens + b * kN;
        for (int g = 0; g < G; ++g) {
          const VF wv = hn::LoadU(df, w + g * kPageTokens + t);
          for (int c = 0; c < kP; ++c) r[par][c][g] = hn::MulAdd(v[c], wv, r[par][c][g]);
        }
      }
    };
    int k = 0;
    if constexpr (kPar == 2) {
      for (; k + 1 < groups.count; k += 2) {
        step(0, groups.index[k]);
        step(1, groups.index[k + 1]);
      }
    }
    for (; k < groups.count; ++k) step(0, groups.index[k]);
    const int i = u * UnitDims<kBits>() + K;
    for (int g = 0; g < G; ++g) {
      for (int c = 0; c < kP; ++c) {
        float* a = acc + (static_cast<size_t>(g) * head_dim + i + c) * kN;
        VF sum = r[0][c][g];
        if constexpr (kPar == 2) sum = hn::Add(sum, r[1][c][g]);
        hn::StoreU(hn::Add(hn::LoadU(df, a), sum), df, a);
      }
    }
    AccumulateUnit<kBits, G, kSpan, K + kP>(codes, group_bytes, seg_offset, dims, u, groups, lut, w, acc,
                                            head_dim);
  }
}

#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
// The 4-bit value pass with DecodeUnit4Quads (lut.bf16_exact): per unit, two chains per head (quads 0, 2 and
// 1, 3 of each group), each lane-pair [coordinate 0 | coordinate 1]; the low half is added to coordinate 0's
// lane-wise sums, the high half to coordinate 1's. wq: [G][2 * kPageTokens], for each 4 tokens of the page
// their 4 weights twice.
template <int G>
HWY_NOINLINE void AccumulateCodes4Quads(const uint8_t* codes, size_t group_bytes, const CodeSegment& seg,
                                        const GroupList& groups, const Lut& lut, const float* w, float* acc,
                                        int head_dim, PagePrefetch& pf) {
  alignas(32) float wq[G * 2 * kPageTokens];
  for (int k = 0; k < groups.count; ++k) {
    const int t0 = groups.index[k] * kGroupTokens;
    for (int g = 0; g < G; ++g) {
      for (int b = 0; b < 2; ++b) {
        const __m256 v = _mm256_loadu_ps(w + g * kPageTokens + t0 + 8 * b);
        float* out = wq + g * 2 * kPageTokens + 2 * (t0 + 8 * b);
        _mm256_store_ps(out, _mm256_permute2f128_ps(v, v, 0x00));
        _mm256_store_ps(out + 8, _mm256_permute2f128_ps(v, v, 0x11));
      }
    }
  }
  float* a = acc + static_cast<size_t>(seg.first) * kN;
  for (int u = 0; u < seg.dims / 2; ++u) {
    pf.Step();
    __m256 r[2][G];
    for (int g = 0; g < G; ++g) r[0][g] = r[1][g] = _mm256_setzero_ps();
    for (int k = 0; k < groups.count; ++k) {
      const int grp = groups.index[k];
      __m256 m[4];
      DecodeUnit4Quads(
          lut, codes + grp * group_bytes + seg.group_offset + static_cast<size_t>(u) * kGroupTokens, m);
      const float* wg = wq + 2 * grp * kGroupTokens;
      for (int g = 0; g < G; ++g) {
        for (int quad = 0; quad < 4; ++quad) {
          r[quad & 1][g] =
              _mm256_fmadd_ps(m[quad], _mm256_load_ps(wg + g * 2 * kPageTokens + 8 * quad), r[quad & 1][g]);
        }
      }
    }
    for (int g = 0; g < G; ++g) {
      const __m256 sum = _mm256_add_ps(r[0][g], r[1][g]);
      const __m256 zero = _mm256_setzero_ps();
      float* a0 = a + (static_cast<size_t>(g) * head_dim + 2 * u) * kN;
      _mm256_storeu_ps(a0, _mm256_add_ps(_mm256_loadu_ps(a0), _mm256_blend_ps(sum, zero, 0xF0)));
      _mm256_storeu_ps(a0 + kN, _mm256_add_ps(_mm256_loadu_ps(a0 + kN), _mm256_blend_ps(zero, sum, 0xF0)));
    }
  }
}
#endif

template <int kBits, int G>
HWY_NOINLINE void AccumulateCodes(const uint8_t* codes, size_t group_bytes, const CodeSegment& seg,
                                  const GroupList& groups, const Lut& lut, const float* w, float* acc,
                                  int head_dim, PagePrefetch& pf) {
  constexpr int kUnits = PassUnits<kBits>();
  // Segments hold a multiple of 8 coordinates (CodeSegment), so passes of kUnits units (at most 4
  // coordinates) tile them.
  assert(seg.dims % (kUnits * UnitDims<kBits>()) == 0);
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
  if constexpr (kShuffleLookup<kBits>) {
    if (lut.bf16_exact) {
      AccumulateCodes4Quads<G>(codes, group_bytes, seg, groups, lut, w, acc, head_dim, pf);
      return;
    }
  }
#endif
  float* a = acc + static_cast<size_t>(seg.first) * kN;
  for (int u = 0; u < seg.dims / UnitDims<kBits>(); u += kUnits) {
    for (int k = 0; k < kUnits; ++k) pf.Step();
    AccumulateUnit<kBits, G, kUnits * UnitDims<kBits>()>(codes, group_bytes, seg.group_offset, seg.dims, u,
                                                         groups, lut, w, a, head_dim);
  }
}

// Coordinates [i0, i0 + kDims) of f16 (kHalf) or int8 values over all active groups, one chain per
// (coordinate, head); the weights of a block are held in registers for the kDims coordinates where they fit.
template <int G, bool kHalf, int kDims>
HWY_INLINE void AccumulatePlainPass(const uint8_t* codes, size_t group_bytes, const CodeSegment& seg, int i0,
                                    const GroupList& groups, const float* w, float* acc, int head_dim) {
  const DF df;
  // Weights held in registers: as many as fit beside the accumulators, the value and a temporary (AVX2: all
  // for G <= 3, 2 for G = 4); the others are FMA memory operands, loaded again per coordinate.
  constexpr int kHeld = std::clamp(kVectorRegs - kDims * G - 2, 0, G);
  VF r[kDims][G];
  for (int c = 0; c < kDims; ++c) {
    for (int g = 0; g < G; ++g) r[c][g] = hn::Zero(df);
  }
  for (int k = 0; k < groups.count; ++k) {
    const int grp = groups.index[k];
    const uint8_t* rows = codes + grp * group_bytes + seg.group_offset;
    for (size_t b = 0; b < kBlocks; ++b) {
      const size_t t = static_cast<size_t>(grp) * kGroupTokens + b * kN;
      VF wv[G];
      for (int g = 0; g < kHeld; ++g) wv[g] = hn::LoadU(df, w + g * kPageTokens + t);
      const float* wt = w + t;
      for (int c = 0; c < kDims; ++c) {
        const int i = i0 + c;
        wt = Opaque(wt);
        VF val;
        if constexpr (kHalf) {
          const hwy::float16_t* h = reinterpret_cast<const hwy::float16_t*>(rows) + i * kGroupTokens + b * kN;
          val = hn::PromoteTo(df, hn::LoadU(DH(), h));
        } else {
          const int8_t* c8 = reinterpret_cast<const int8_t*>(rows) + i * kGroupTokens + b * kN;
          val = hn::ConvertTo(df, hn::PromoteTo(DI(), hn::LoadU(DI8(), c8)));
        }
        for (int g = 0; g < G; ++g) {
          r[c][g] = hn::MulAdd(val, g < kHeld ? wv[g] : hn::LoadU(df, wt + g * kPageTokens), r[c][g]);
        }
      }
    }
  }
  for (int c = 0; c < kDims; ++c) {
    for (int g = 0; g < G; ++g) {
      float* a = acc + (static_cast<size_t>(g) * head_dim + i0 + c) * kN;
      hn::StoreU(hn::Add(hn::LoadU(df, a), r[c][g]), df, a);
    }
  }
}

// Coordinates per AccumulatePlainPass: 4 with 32 registers; with 16, 3 (12 accumulators for G = 4; for G = 3,
// 9 and all 3 weights held). Four coordinates and G = 3 on AVX2 left the compiler one register short (12 + 3
// weights + the value): it spilled an accumulator, a store and a reload in that chain (f16 decode attention,
// L2-resident: 15.8 -> 14.4 ns/token on Zen 3 with 3 + 3 + 2).
template <int G>
constexpr int PlainPassDims() {
  return kVectorRegs >= 32 ? 4 : 3;
}

// f16 (kHalf) or int8 values, in passes of PlainPassDims coordinates (a segment's 8-coordinate blocks as 4 +
// 4 or 3 + 3 + 2).
template <int G, bool kHalf>
HWY_NOINLINE void AccumulatePlain(const uint8_t* codes, size_t group_bytes, const CodeSegment& seg,
                                  const GroupList& groups, const float* w, float* acc, int head_dim,
                                  PagePrefetch& pf) {
  constexpr int kDims = PlainPassDims<G>();
  assert(seg.dims % 8 == 0);
  for (int i8 = 0; i8 < seg.dims; i8 += 8) {
    int i0 = i8;
    for (; i0 + kDims <= i8 + 8; i0 += kDims) {
      pf.Step();
      AccumulatePlainPass<G, kHalf, kDims>(codes, group_bytes, seg, i0, groups, w, acc, head_dim);
    }
    if constexpr (8 % kDims != 0) {
      AccumulatePlainPass<G, kHalf, 8 % kDims>(codes, group_bytes, seg, i0, groups, w, acc, head_dim);
    }
  }
}

HWY_INLINE VF LoadNorms(const uint8_t* page, const CodeLayout& layout, int slot, size_t t) {
  const hwy::float16_t* norms = reinterpret_cast<const hwy::float16_t*>(page + layout.norms_offset);
  return hn::PromoteTo(DF(), hn::LoadU(DH(), norms + static_cast<size_t>(slot) * kPageTokens + t));
}

// scores: [G][kPageTokens], filled for the page's first `groups` groups (scaled by plan.scale); passes may run
// past `groups` up to the page's 8 groups (pages are always full size; the extra scores are ignored).
// One segment of a K page: scores[g][t] += factor(t) * q[g] . value(t) over the page's first `groups` groups, in
// passes of ScoreGroupsPerPass groups (a pass may run past `groups` up to the page's 8; those scores are ignored).
// `first`: the page's first segment, which writes the scores instead of adding to them.
template <int G, bool kCodes>
HWY_NOINLINE void ScoreSegment(const Plan& plan, const PlannedPage& page, const CodeSegment& seg, const Lut& lut,
                               const float* const* q, int groups, bool first, float* scores, PagePrefetch& pf) {
  constexpr int kGroups = ScoreGroupsPerPass<G, kCodes>();
  const DF df;
  const CodeLayout& layout = page.k_codec->layout();
  const size_t gb = layout.group_bytes;
  const int passes = (groups + kGroups - 1) / kGroups;
  for (int pass = 0; pass < passes; ++pass) {
    const int grp0 = pass * kGroups;
    const uint8_t* rows = page.k + layout.codes_offset + grp0 * gb + seg.group_offset;
    ScoreAcc<G, kGroups> acc;
    for (int g = 0; g < G; ++g) {
      for (int j = 0; j < kGroups; ++j) {
        for (size_t b = 0; b < kBlocks; ++b) acc[g][j][b] = hn::Zero(df);
      }
    }
    if constexpr (!kCodes) {
      if (seg.bits == 16) {
        ScorePlain<G, kGroups, true>(rows, gb, seg.dims, q, acc, pf);
      } else {
        ScorePlain<G, kGroups, false>(rows, gb, seg.dims, q, acc, pf);
      }
    } else {
      switch (seg.bits) {
        case 1: ScoreCodes<1, G, kGroups>(rows, gb, seg.dims, lut, q, acc, pf); break;
        case 2: ScoreCodes<2, G, kGroups>(rows, gb, seg.dims, lut, q, acc, pf); break;
        case 3: ScoreCodes<3, G, kGroups>(rows, gb, seg.dims, lut, q, acc, pf); break;
        case 4: ScoreCodes<4, G, kGroups>(rows, gb, seg.dims, lut, q, acc, pf); break;
        case 8: ScoreCodes<8, G, kGroups>(rows, gb, seg.dims, lut, q, acc, pf); break;
      }
    }
    for (int j = 0; j < kGroups; ++j) {
      for (size_t b = 0; b < kBlocks; ++b) {
        const size_t t = static_cast<size_t>(grp0 + j) * kGroupTokens + b * kN;
        VF factor;
        if constexpr (kCodes) {
          factor = hn::Mul(LoadNorms(page.k, layout, seg.norm_slot, t), hn::Set(df, plan.scale));
        } else {
          factor = hn::Set(df, (seg.bits == 16 ? 1.0f : page.k_scale) * plan.scale);
        }
        for (int g = 0; g < G; ++g) {
          float* out = scores + g * kPageTokens + t;
          const VF part = hn::Mul(acc[g][j][b], factor);
          hn::StoreU(first ? part : hn::Add(part, hn::LoadU(df, out)), df, out);
        }
      }
    }
  }
}

// scores: [G][kPageTokens], filled for the page's first `groups` groups (scaled by plan.scale); entries past
// `groups` may be written too (pages are always full size; the extra scores are ignored).
// qb: per domain, the chunk's queries broadcast ([G][d][kN]) where kBroadcastQ, for the plain segments.
template <int G>
void ScorePage(const Plan& plan, const PlannedPage& page, int q0, int groups,
               const std::vector<std::vector<float>>& qb, float* scores, PagePrefetch& pf, LutCache& luts) {
  const int d = plan.head_dim;
  const KvCodec& codec = *page.k_codec;
  const CodeLayout& layout = codec.layout();
  for (size_t s = 0; s < layout.segments.size(); ++s) {
    const CodeSegment& seg = layout.segments[s];
    const float* q[G];
    for (int g = 0; g < G; ++g) {
      if (kBroadcastQ && seg.domain == CodeDomain::kPlain) {
        q[g] = qb[page.k_domains[s]].data() + (static_cast<size_t>(g) * d + seg.first) * kN;
      } else {
        q[g] = plan.domains[page.k_domains[s]].q.data() + static_cast<size_t>(q0 + g) * d + seg.first;
      }
    }
    if (seg.domain == CodeDomain::kPlain) {
      ScoreSegment<G, false>(plan, page, seg, Lut{}, q, groups, s == 0, scores, pf);
    } else {
      ScoreSegment<G, true>(plan, page, seg, luts.Get(codec.SegmentTable(static_cast<int>(s))), q, groups,
                            s == 0, scores, pf);
    }
  }
}

// p: [G][kPageTokens] softmax numerators (0 where skipped or past n).
template <int G>
void AccumulatePage(const Plan& plan, const PlannedPage& page, unsigned groups, const float* p,
                    std::vector<std::vector<float>>& acc, PagePrefetch& pf, LutCache& luts) {
  const GroupList list(groups);
  const DF df;
  const int d = plan.head_dim;
  const KvCodec& codec = *page.v_codec;
  const CodeLayout& layout = codec.layout();
  const uint8_t* codes = page.v + layout.codes_offset;
  alignas(64) float w[G * kPageTokens];
  for (size_t s = 0; s < layout.segments.size(); ++s) {
    const CodeSegment& seg = layout.segments[s];
    float* a = acc[page.v_domains[s]].data();
    for (unsigned left = groups; left != 0; left &= left - 1) {
      const int grp = __builtin_ctz(left);
      for (size_t b = 0; b < kBlocks; ++b) {
        const size_t t = static_cast<size_t>(grp) * kGroupTokens + b * kN;
        VF factor;
        if (seg.domain != CodeDomain::kPlain) {
          factor = LoadNorms(page.v, layout, seg.norm_slot, t);
        } else {
          factor = hn::Set(df, seg.bits == 16 ? 1.0f : page.v_scale);
        }
        for (int g = 0; g < G; ++g) {
          hn::StoreU(hn::Mul(hn::LoadU(df, p + g * kPageTokens + t), factor), df, w + g * kPageTokens + t);
        }
      }
    }
    if (seg.domain == CodeDomain::kPlain) {
      if (seg.bits == 16) {
        AccumulatePlain<G, true>(codes, layout.group_bytes, seg, list, w, a, d, pf);
      } else {
        AccumulatePlain<G, false>(codes, layout.group_bytes, seg, list, w, a, d, pf);
      }
      continue;
    }
    const Lut& lut = luts.Get(codec.SegmentTable(static_cast<int>(s)));
    switch (seg.bits) {
      case 1: AccumulateCodes<1, G>(codes, layout.group_bytes, seg, list, lut, w, a, d, pf); break;
      case 2: AccumulateCodes<2, G>(codes, layout.group_bytes, seg, list, lut, w, a, d, pf); break;
      case 3: AccumulateCodes<3, G>(codes, layout.group_bytes, seg, list, lut, w, a, d, pf); break;
      case 4: AccumulateCodes<4, G>(codes, layout.group_bytes, seg, list, lut, w, a, d, pf); break;
      case 8: AccumulateCodes<8, G>(codes, layout.group_bytes, seg, list, lut, w, a, d, pf); break;
    }
  }
}

// e^x for x <= 0 (a score minus the running maximum) in half of hn::Exp's operations: x = n ln2 + r (two-part
// ln2), e^r by a degree-7 Horner polynomial with hn::Exp's coefficients, times 2^n (AVX-512: one vscalefps;
// elsewhere the exponent bits built directly). Exactly 0 for x < -87.3 (and -inf), where e^x < 1.2e-38
// (hn::Exp keeps denormals down to -104: the difference is below any weight that counts).
HWY_INLINE VF ExpNonPositive(VF x) {
  const DF df;
  const VF low = hn::Set(df, -87.3f);
  const VF xc = hn::Max(x, low);  // -inf and below: n >= -126, so 2^n is a normal float
  const VF n = hn::Round(hn::Mul(xc, hn::Set(df, 1.44269504088896341f)));
  VF r = hn::MulAdd(n, hn::Set(df, -0.693145751953125f), xc);
  r = hn::MulAdd(n, hn::Set(df, -1.428606765330187045e-6f), r);
  VF t = hn::Set(df, 0.000198527617612853646278381f);
  t = hn::MulAdd(t, r, hn::Set(df, 0.00139304355252534151077271f));
  t = hn::MulAdd(t, r, hn::Set(df, 0.00833336077630519866943359f));
  t = hn::MulAdd(t, r, hn::Set(df, 0.0416664853692054748535156f));
  t = hn::MulAdd(t, r, hn::Set(df, 0.166666671633720397949219f));
  t = hn::MulAdd(t, r, hn::Set(df, 0.5f));
  const VF one = hn::Set(df, 1.0f);
  const VF e_r = hn::MulAdd(hn::MulAdd(t, r, one), r, one);  // 1 + r (1 + r t)
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  const VF y = VF{_mm512_scalef_ps(e_r.raw, n.raw)};
#elif HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
  // n is integral in [-126, 0]: the plain truncating conversion is exact (hn::ConvertTo adds an overflow
  // fix-up).
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n.raw), _mm256_set1_epi32(127)), 23);
  const VF y = hn::Mul(e_r, VF{_mm256_castsi256_ps(bits)});
#else
  const VI bits = hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(DI(), n), hn::Set(DI(), 127)));
  const VF y = hn::Mul(e_r, hn::BitCast(df, bits));
#endif
  return hn::IfThenZeroElse(hn::Lt(x, low), y);
}

// Sets pf to ask for the bytes (norms and codes) of a page ahead of its use, spread over the steps of the
// work before it (a page of work, 1-2 us, hides the memory latency that the hardware prefetchers leave
// exposed where a stream crosses into the next page). A step per unit of coordinates (per 4 coordinates of
// f16/int8): of each score pass of a K page (`score`), of the value pass of a V page.
template <int G>
void StartPrefetch(PagePrefetch& pf, const uint8_t* bytes, const KvCodec* codec, int num_tokens, bool score,
                   int groups) {
  const CodeLayout& layout = codec->layout();
  const size_t used = layout.codes_offset + layout.group_bytes * ((num_tokens + kGroupTokens - 1) / kGroupTokens);
  int steps = 0;
  for (const CodeSegment& seg : layout.segments) {
    const bool plain = seg.domain == CodeDomain::kPlain;
    // ScorePlain / AccumulatePlain step per 4 coordinates, ScoreCodes / AccumulateCodes per unit.
    const int units = plain ? seg.dims / 4 : seg.dims / UnitDimsOf(seg.bits);
    if (score) {
      const int per_pass = plain ? ScoreGroupsPerPass<G, false>() : ScoreGroupsPerPass<G, true>();
      steps += (groups + per_pass - 1) / per_pass * units;
    } else {
      steps += units;
    }
  }
  pf.Start(bytes + layout.norms_offset, used - layout.norms_offset, steps);
}

// Query heads [q0, q0 + G) over the first token_limit tokens; writes out[q0 .. q0 + G).
// Queries [q0, q0 + G) over the tokens at positions [token_first, token_limit).
template <int G>
void RunChunk(const Plan& plan, int q0, int64_t token_first, int64_t token_limit, float threshold, float* out,
              AttentionStats* stats) {
  const DF df;
  const int d = plan.head_dim;
  // acc[domain]: [G][d][kN] lane-wise partial sums.
  std::vector<std::vector<float>> acc(plan.domains.size(), std::vector<float>(static_cast<size_t>(G) * d * kN));
  // qb[domain]: [G][d][kN], the chunk's queries broadcast (kBroadcastQ).
  std::vector<std::vector<float>> qb(kBroadcastQ ? plan.domains.size() : 0);
  for (size_t dom = 0; dom < qb.size(); ++dom) {
    qb[dom].resize(static_cast<size_t>(G) * d * kN);
    for (int g = 0; g < G; ++g) {
      for (int i = 0; i < d; ++i) {
        const VF v = hn::Set(df, plan.domains[dom].q[static_cast<size_t>(q0 + g) * d + i]);
        hn::StoreU(v, df, qb[dom].data() + (static_cast<size_t>(g) * d + i) * kN);
      }
    }
  }
  alignas(64) float scores[G * kPageTokens];
  alignas(64) float p[G * kPageTokens];
  LutCache luts;
  double m[G], l[G];
  std::vector<double> fix;  // [G][d]: sum of weight * first_value (KvPageRef), once a page has one
  for (int g = 0; g < G; ++g) {
    m[g] = -std::numeric_limits<double>::infinity();
    l[g] = 0.0;
  }
  int64_t position = 0, scored = 0, skipped = 0;
  // Numerators below keep_min are dropped: the threshold, or the smallest positive float (so only zeros are).
  const VF keep_min = hn::Set(df, std::max(threshold, std::numeric_limits<float>::denorm_min()));
  for (size_t pi = 0; pi < plan.pages.size(); ++pi) {
    const PlannedPage& page = plan.pages[pi];
    const PlannedPage* next = pi + 1 < plan.pages.size() ? &plan.pages[pi + 1] : nullptr;
    const int n = static_cast<int>(std::min<int64_t>(page.num_tokens, token_limit - position));
    // Tokens of this page before the window: [0, before).
    const int before = static_cast<int>(std::clamp<int64_t>(token_first - position, 0, page.num_tokens));
    position += page.num_tokens;
    if (n <= 0) break;
    if (before >= n) continue;  // the whole page is before the window
    const int groups = (n + kGroupTokens - 1) / kGroupTokens;
    PagePrefetch pf;
    if (next != nullptr) StartPrefetch<G>(pf, next->k, next->k_codec, next->num_tokens, true, groups);
    ScorePage<G>(plan, page, q0, groups, qb, scores, pf, luts);
    pf.Finish();
    VF vm[G];
    for (int g = 0; g < G; ++g) {
      float* s = scores + g * kPageTokens;
      if (page.score_bias != nullptr) {
        const VF b = hn::Set(df, page.score_bias[q0 + g]);
        for (int t = 0; t < groups * kGroupTokens; t += kN) hn::StoreU(hn::Add(hn::LoadU(df, s + t), b), df, s + t);
      }
      if (page.first_bias != nullptr) s[0] += page.first_bias[q0 + g];
      for (int t = 0; t < before; ++t) s[t] = -std::numeric_limits<float>::infinity();
      for (int t = n; t < groups * kGroupTokens; ++t) s[t] = -std::numeric_limits<float>::infinity();
      VF vmax = hn::Set(df, -std::numeric_limits<float>::infinity());
      for (int t = 0; t < groups * kGroupTokens; t += kN) vmax = hn::Max(vmax, hn::LoadU(df, s + t));
      const double m_new = std::max<double>(m[g], hn::GetLane(hn::MaxOfLanes(df, vmax)));
      const double alpha = std::isinf(m[g]) ? 0.0 : std::exp(m[g] - m_new);
      if (alpha != 1.0) {
        l[g] *= alpha;
        for (size_t i = 0; i < fix.size() / G; ++i) fix[static_cast<size_t>(g) * d + i] *= alpha;
        const VF va = hn::Set(df, static_cast<float>(alpha));
        for (auto& a : acc) {
          float* row = a.data() + static_cast<size_t>(g) * d * kN;
          for (size_t i = 0; i < d * kN; i += kN) hn::StoreU(hn::Mul(hn::LoadU(df, row + i), va), df, row + i);
        }
      }
      m[g] = m_new;
      vm[g] = hn::Set(df, static_cast<float>(m_new));
    }
    // Numerators, all heads per block (independent exp chains). Padding lanes [n, 16 * groups) hold -inf
    // scores, so their numerator is exactly 0 (ExpNonPositive is 0 below -87.3). A numerator is kept where it
    // is >= the threshold and > 0 (keep_min); a group is active where any is kept. Skipped (threshold > 0):
    // the lanes not kept, less the padding and the tokens before the window, counted afterwards.
    unsigned active = 0;
    VI kept = hn::Zero(DI());  // lane-wise count of kept numerators (a true mask lane is -1)
    VF sum[G];
    for (int g = 0; g < G; ++g) sum[g] = hn::Zero(df);
    for (int grp = 0; grp < groups; ++grp) {
      auto any = hn::FirstN(df, 0);
      for (size_t b = 0; b < kBlocks; ++b) {
        const int t = grp * kGroupTokens + static_cast<int>(b * kN);
        for (int g = 0; g < G; ++g) {
          const VF e = ExpNonPositive(hn::Sub(hn::LoadU(df, scores + g * kPageTokens + t), vm[g]));
          sum[g] = hn::Add(sum[g], e);
          const auto keep = hn::Ge(e, keep_min);
          kept = hn::Sub(kept, hn::BitCast(DI(), hn::VecFromMask(df, keep)));
          any = hn::Or(any, keep);
          hn::StoreU(hn::IfThenElseZero(keep, e), df, p + g * kPageTokens + t);
        }
      }
      if (!hn::AllFalse(df, any)) active |= 1u << grp;
    }
    const size_t kept_lanes = static_cast<size_t>(hn::GetLane(hn::SumOfLanes(DI(), kept)));
    for (int g = 0; g < G; ++g) l[g] += hn::GetLane(hn::SumOfLanes(df, sum[g]));
    if (page.first_value != nullptr && before == 0) {
      if (fix.empty()) fix.assign(static_cast<size_t>(G) * d, 0.0);
      for (int g = 0; g < G; ++g) {
        const double w = std::exp(static_cast<double>(scores[g * kPageTokens]) - m[g]);
        for (int i = 0; i < d; ++i) fix[static_cast<size_t>(g) * d + i] += w * page.first_value[i];
      }
    }
    scored += static_cast<int64_t>(G) * (n - before);
    if (threshold > 0.0f) {
      skipped += static_cast<int64_t>(G) * (n - before) - static_cast<int64_t>(kept_lanes);
    }
    pf = PagePrefetch{};
    if (next != nullptr) StartPrefetch<G>(pf, next->v, next->v_codec, next->num_tokens, false, groups);
    if (active != 0) AccumulatePage<G>(plan, page, active, p, acc, pf, luts);
    pf.Finish();
  }
  if (stats != nullptr) {
    stats->scored += scored;
    stats->skipped += skipped;
  }
  std::vector<float> reduced(d);
  for (int g = 0; g < G; ++g) {
    float* o = out + static_cast<size_t>(q0 + g) * d;
    std::fill(o, o + d, 0.0f);
    if (l[g] <= 0.0) continue;
    const float inv_l = static_cast<float>(1.0 / l[g]);
    for (size_t dom = 0; dom < plan.domains.size(); ++dom) {
      const float* a = acc[dom].data() + static_cast<size_t>(g) * d * kN;
      for (int i = 0; i < d; ++i) {
        reduced[i] = hn::GetLane(hn::SumOfLanes(df, hn::LoadU(df, a + static_cast<size_t>(i) * kN))) * inv_l;
      }
      attention_internal::AddFromDomain(plan.domains[dom], d, reduced.data(), o);
    }
    if (!fix.empty()) {
      for (int i = 0; i < d; ++i) o[i] += static_cast<float>(fix[static_cast<size_t>(g) * d + i] / l[g]);
    }
  }
}

}  // namespace

// rows x group queries; row r attends to the first first_position + r + 1 tokens, or to all if first_position < 0,
// and with window > 0 only to the last `window` of those.
void RunAttention(const Plan& plan, int rows, int group, int64_t first_position, int window, float threshold,
                  float* out, AttentionStats* stats) {
  int64_t total = 0;
  for (const PlannedPage& page : plan.pages) total += page.num_tokens;
  for (int r = 0; r < rows; ++r) {
    const int64_t limit = first_position < 0 ? total : first_position + r + 1;
    const int64_t first = window > 0 ? limit - window : 0;
    for (int q0 = r * group; q0 < (r + 1) * group; q0 += kMaxChunk) {
      switch (std::min(kMaxChunk, (r + 1) * group - q0)) {
        case 1: RunChunk<1>(plan, q0, first, limit, threshold, out, stats); break;
        case 2: RunChunk<2>(plan, q0, first, limit, threshold, out, stats); break;
        case 3: RunChunk<3>(plan, q0, first, limit, threshold, out, stats); break;
        case 4: RunChunk<4>(plan, q0, first, limit, threshold, out, stats); break;
      }
    }
  }
}

}  // namespace tq::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tq::kernels {

HWY_EXPORT(RunAttention);

Status DecodeAttention(std::span<const KvPageRef> pages, int head_dim, const float* q, int num_q,
                       const AttentionOptions& options, float* out, AttentionStats* stats) {
  TQ_ASSIGN_OR_RETURN(attention_internal::Plan plan, attention_internal::MakePlan(pages, head_dim, q, num_q, options));
  HWY_DYNAMIC_DISPATCH(RunAttention)(plan, 1, num_q, -1, options.window, options.skip_threshold, out, stats);
  return Status::Ok();
}

Status PrefillAttention(std::span<const KvPageRef> pages, int head_dim, const float* q, int rows, int group,
                        int first_position, const AttentionOptions& options, float* out, AttentionStats* stats) {
  if (rows < 1 || group < 1 || first_position < 0) {
    return InvalidArgumentError("prefill attention: need rows >= 1, group >= 1, first_position >= 0");
  }
  TQ_ASSIGN_OR_RETURN(attention_internal::Plan plan,
                      attention_internal::MakePlan(pages, head_dim, q, rows * group, options));
  HWY_DYNAMIC_DISPATCH(RunAttention)(plan, rows, group, first_position, options.window, options.skip_threshold, out,
                                     stats);
  return Status::Ok();
}

}  // namespace tq::kernels
#endif  // HWY_ONCE
