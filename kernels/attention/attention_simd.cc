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

// The passes, per target (each re-included for every target like this file).
#include "kernels/attention/simd_common-inl.h"
#include "kernels/attention/simd_scores-inl.h"
#include "kernels/attention/simd_values-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tq::kernels::HWY_NAMESPACE {
namespace {

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
      if (plan.softcap > 0.0f) {  // scalar: only soft-capped models (Gemma 2) pay for it
        const float cap = plan.softcap, inv_cap = 1.0f / plan.softcap;
        for (int t = before; t < n; ++t) s[t] = cap * std::tanh(s[t] * inv_cap);
      }
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
