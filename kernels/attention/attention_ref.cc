// Scalar reference attention on KV pages. Plain loops, double accumulators; never deleted.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/attention/plan.h"
#include "kernels/formats/fp16.h"

namespace tq::kernels {

using attention_internal::Plan;
using attention_internal::PlannedPage;

namespace {

const uint8_t* GroupOf(const uint8_t* page, const CodeLayout& layout, int token) {
  return page + layout.codes_offset + layout.group_bytes * (token / kGroupTokens);
}

// The value of coordinate i of segment s for one token, as the page codes it (norm and scale applied). scale: the
// page header's (int8 values, compact formats' norms).
double SegmentValue(const KvCodec& codec, const uint8_t* page, float scale, int s, int i, int token) {
  const CodeLayout& layout = codec.layout();
  const CodeSegment& seg = layout.segments[s];
  const uint8_t* group = GroupOf(page, layout, token);
  const int t = token % kGroupTokens;
  if (seg.bits == 16) return HalfToFloat(reinterpret_cast<const uint16_t*>(group)[i * kGroupTokens + t]);
  if (seg.domain == CodeDomain::kPlain) return static_cast<int8_t>(GetCode(group, seg, i, t)) * double{scale};
  return double{ReadNorm(page, layout, seg.norm_slot, token, scale)} * codec.SegmentTable(s)[GetCode(group, seg, i, t)];
}

// Attention for queries [q_begin, q_begin + q_count) of the plan over the tokens at positions
// [token_first, token_limit).
void RunQueries(const Plan& plan, int q_begin, int q_count, int64_t token_first, int64_t token_limit,
                float threshold, float* out, AttentionStats* stats) {
  const int d = plan.head_dim;
  const size_t domains = plan.domains.size();
  for (int g = q_begin; g < q_begin + q_count; ++g) {
    double m = -std::numeric_limits<double>::infinity(), l = 0.0;
    std::vector<std::vector<double>> acc(domains, std::vector<double>(d, 0.0));
    std::vector<double> fix(d, 0.0);  // sum of weight * first_value, in the output space
    int64_t position = 0;
    for (const PlannedPage& page : plan.pages) {
      const int n = static_cast<int>(std::min<int64_t>(page.num_tokens, token_limit - position));
      const int before = static_cast<int>(std::clamp<int64_t>(token_first - position, 0, page.num_tokens));
      position += page.num_tokens;
      if (n <= 0) break;
      if (before >= n) continue;
      const KvCodec& kc = *page.k_codec;
      std::vector<double> scores(n, -std::numeric_limits<double>::infinity());
      for (int token = before; token < n; ++token) {
        double score = 0.0;
        for (size_t s = 0; s < kc.layout().segments.size(); ++s) {
          const CodeSegment& seg = kc.layout().segments[s];
          const float* q = plan.domains[page.k_domains[s]].q.data() + static_cast<size_t>(g) * d + seg.first;
          for (int i = 0; i < seg.dims; ++i) score += q[i] * SegmentValue(kc, page.k, page.k_scale, s, i, token);
        }
        scores[token] = score * plan.scale;
        if (page.score_bias != nullptr) scores[token] += page.score_bias[g];
        if (token == 0 && page.first_bias != nullptr) scores[token] += page.first_bias[g];
        if (plan.softcap > 0.0f) scores[token] = plan.softcap * std::tanh(scores[token] / plan.softcap);
      }
      double m_new = m;
      for (double s : scores) m_new = std::max(m_new, s);
      const double alpha = std::isinf(m) ? 0.0 : std::exp(m - m_new);
      l *= alpha;
      for (auto& a : acc) {
        for (double& v : a) v *= alpha;
      }
      for (double& v : fix) v *= alpha;
      m = m_new;
      const KvCodec& vc = *page.v_codec;
      for (int token = before; token < n; ++token) {
        const double p = std::exp(scores[token] - m);
        l += p;
        if (token == 0 && page.first_value != nullptr) {
          for (int i = 0; i < d; ++i) fix[i] += p * page.first_value[i];
        }
        if (stats != nullptr) ++stats->scored;
        if (p < threshold) {
          if (stats != nullptr) ++stats->skipped;
          continue;
        }
        for (size_t s = 0; s < vc.layout().segments.size(); ++s) {
          const CodeSegment& seg = vc.layout().segments[s];
          std::vector<double>& a = acc[page.v_domains[s]];
          for (int i = 0; i < seg.dims; ++i) a[seg.first + i] += p * SegmentValue(vc, page.v, page.v_scale, s, i, token);
        }
      }
    }
    float* o = out + static_cast<size_t>(g) * d;
    std::fill(o, o + d, 0.0f);
    if (l <= 0.0) continue;
    for (size_t dom = 0; dom < domains; ++dom) {
      std::vector<float> scaled(d);
      for (int i = 0; i < d; ++i) scaled[i] = static_cast<float>(acc[dom][i] / l);
      attention_internal::AddFromDomain(plan.domains[dom], d, scaled.data(), o);
    }
    for (int i = 0; i < d; ++i) o[i] += static_cast<float>(fix[i] / l);
  }
}

}  // namespace

Status DecodeAttentionReference(std::span<const KvPageRef> pages, int head_dim, const float* q, int num_q,
                                const AttentionOptions& options, float* out, AttentionStats* stats) {
  TQ_ASSIGN_OR_RETURN(Plan plan, attention_internal::MakePlan(pages, head_dim, q, num_q, options));
  int64_t total = 0;
  for (const auto& page : plan.pages) total += page.num_tokens;
  RunQueries(plan, 0, num_q, options.window > 0 ? total - options.window : 0, total, options.skip_threshold, out,
             stats);
  return Status::Ok();
}

Status PrefillAttentionReference(std::span<const KvPageRef> pages, int head_dim, const float* q, int rows,
                                 int group, int first_position, const AttentionOptions& options, float* out,
                                 AttentionStats* stats) {
  if (rows < 1 || group < 1 || first_position < 0) {
    return InvalidArgumentError("prefill attention: need rows >= 1, group >= 1, first_position >= 0");
  }
  TQ_ASSIGN_OR_RETURN(Plan plan, attention_internal::MakePlan(pages, head_dim, q, rows * group, options));
  for (int r = 0; r < rows; ++r) {
    const int64_t limit = static_cast<int64_t>(first_position) + r + 1;
    RunQueries(plan, r * group, group, options.window > 0 ? limit - options.window : 0, limit,
               options.skip_threshold, out, stats);
  }
  return Status::Ok();
}

}  // namespace tq::kernels
