// The value pass of the SIMD attention: sum over tokens of weight * v for every coordinate of a V page.
// Per-target code of kernels/attention/attention_simd.cc: included once per SIMD target (Highway's
// foreach_target re-includes that file), hence the toggled guard; only attention_simd.cc includes it.
#if defined(TQ_KERNELS_ATTENTION_SIMD_VALUES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TQ_KERNELS_ATTENTION_SIMD_VALUES_INL_H_
#undef TQ_KERNELS_ATTENTION_SIMD_VALUES_INL_H_
#else
#define TQ_KERNELS_ATTENTION_SIMD_VALUES_INL_H_
#endif

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tq::kernels::HWY_NAMESPACE {
namespace {

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
          factor = LoadNorms(page.v, layout, seg.norm_slot, t, page.v_scale);
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

}  // namespace
}  // namespace tq::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // TQ_KERNELS_ATTENTION_SIMD_VALUES_INL_H_
