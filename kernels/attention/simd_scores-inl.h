// The score pass of the SIMD attention: q . k for every token of a K page, on its codes or f16/int8 rows.
// Per-target code of kernels/attention/attention_simd.cc: included once per SIMD target (Highway's
// foreach_target re-includes that file), hence the toggled guard; only attention_simd.cc includes it.
#if defined(TQ_KERNELS_ATTENTION_SIMD_SCORES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TQ_KERNELS_ATTENTION_SIMD_SCORES_INL_H_
#undef TQ_KERNELS_ATTENTION_SIMD_SCORES_INL_H_
#else
#define TQ_KERNELS_ATTENTION_SIMD_SCORES_INL_H_
#endif

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tq::kernels::HWY_NAMESPACE {
namespace {

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
          factor = hn::Mul(LoadNorms(page.k, layout, seg.norm_slot, t, page.k_scale), hn::Set(df, plan.scale));
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

}  // namespace
}  // namespace tq::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // TQ_KERNELS_ATTENTION_SIMD_SCORES_INL_H_
