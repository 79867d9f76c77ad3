// Shared by both passes of the SIMD attention: vector types, code tables in registers (Lut), code decoding, the
// next page's prefetch, and how many token groups a pass keeps in registers.
// Per-target code of kernels/attention/attention_simd.cc: included once per SIMD target (Highway's
// foreach_target re-includes that file), hence the toggled guard; only attention_simd.cc includes it.
#if defined(TQ_KERNELS_ATTENTION_SIMD_COMMON_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TQ_KERNELS_ATTENTION_SIMD_COMMON_INL_H_
#undef TQ_KERNELS_ATTENTION_SIMD_COMMON_INL_H_
#else
#define TQ_KERNELS_ATTENTION_SIMD_COMMON_INL_H_
#endif

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


// The norms of tokens [t, t + kN) of a page's code segment (norm slot `slot`), as floats. scale: the page's
// (compact formats: norm = 8-bit code * scale; unused for fp16 norms).
HWY_INLINE VF LoadNorms(const uint8_t* page, const CodeLayout& layout, int slot, size_t t, float scale) {
  if (layout.norm_bytes == 1) {
    const uint8_t* codes = page + layout.norms_offset + static_cast<size_t>(slot) * kPageTokens + t;
    return hn::Mul(hn::ConvertTo(DF(), hn::PromoteTo(DI(), hn::LoadU(DU8(), codes))), hn::Set(DF(), scale));
  }
  const hwy::float16_t* norms = reinterpret_cast<const hwy::float16_t*>(page + layout.norms_offset);
  return hn::PromoteTo(DF(), hn::LoadU(DH(), norms + static_cast<size_t>(slot) * kPageTokens + t));
}

}  // namespace
}  // namespace tq::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // TQ_KERNELS_ATTENTION_SIMD_COMMON_INL_H_
