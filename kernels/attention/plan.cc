#include "kernels/attention/plan.h"

#include <cassert>
#include <cmath>
#include <cstring>
#include <string>

namespace tq::kernels::attention_internal {

namespace {

// The last page header validated for one side (K or V) of the pages: consecutive pages of a head nearly
// always carry the same 64 header bytes (format, head_dim, seed, outlier set, a full page; int8 pages differ
// in their scale), and a header equal byte for byte to one that passed every check passes them again.
struct HeaderMemo {
  uint8_t bytes[kPageHeaderBytes];
  PageHeader header;
  const KvCodec* codec = nullptr;
};

StatusOr<const KvCodec*> CodecFor(const uint8_t* bytes, KvFormat format, int head_dim, int num_tokens,
                                  HeaderMemo& memo, float* scale) {
  if (bytes == nullptr) return InvalidArgumentError("attention: null page");
  // A hit needs the page table's format and head_dim too: the memo's header matched the table of its own
  // page.
  const bool hit = memo.codec != nullptr && memo.codec->format() == format &&
                   memo.codec->head_dim() == head_dim &&
                   std::memcmp(bytes, memo.bytes, kPageHeaderBytes) == 0;
  if (!hit) {
    TQ_ASSIGN_OR_RETURN(size_t size, PageBytes(format, head_dim));
    TQ_ASSIGN_OR_RETURN(PageHeader header, ReadPageHeader(std::span<const uint8_t>(bytes, size)));
    if (header.format != static_cast<uint8_t>(format) || header.head_dim != head_dim) {
      return InvalidArgumentError("attention: page header says format " + std::to_string(header.format) +
                                  " head_dim " + std::to_string(header.head_dim) + ", page table says " +
                                  std::string(FormatName(format)) + " " + std::to_string(head_dim));
    }
    // Consecutive pages of one head nearly always share a codec: skip the cache lookup.
    const KvCodec* codec = memo.codec;
    if (codec == nullptr || codec->format() != format || codec->head_dim() != head_dim ||
        (IsRotated(format) && codec->seed() != header.seed) || codec->outlier_mask() != header.outlier_mask) {
      TQ_ASSIGN_OR_RETURN(codec, KvCodec::ForHeader(header));
    }
    std::memcpy(memo.bytes, bytes, kPageHeaderBytes);
    memo.header = header;
    memo.codec = codec;
  }
  if (num_tokens < 0 || num_tokens > memo.header.num_tokens) {
    return InvalidArgumentError("attention: page table has " + std::to_string(num_tokens) +
                                " tokens, page holds " + std::to_string(memo.header.num_tokens));
  }
  *scale = memo.header.scale;
  return memo.codec;
}

int DomainIndex(Plan& plan, const KvCodec* codec, CodeDomain kind, const float* q) {
  const KvCodec* key = kind == CodeDomain::kPlain ? nullptr : codec;
  for (size_t i = 0; i < plan.domains.size(); ++i) {
    if (plan.domains[i].codec == key && plan.domains[i].kind == kind) return static_cast<int>(i);
  }
  Domain domain;
  domain.codec = key;
  domain.kind = kind;
  const int d = plan.head_dim;
  domain.q.assign(static_cast<size_t>(plan.num_q) * d, 0.0f);
  for (int g = 0; g < plan.num_q; ++g) {
    const float* src = q + static_cast<size_t>(g) * d;
    float* dst = domain.q.data() + static_cast<size_t>(g) * d;
    switch (kind) {
      case CodeDomain::kPlain:
        std::copy(src, src + d, dst);
        break;
      case CodeDomain::kRotated:
        codec->ToRotated(src, dst);
        break;
      case CodeDomain::kSketch: {
        std::vector<float> rotated(d);
        codec->ToRotated(src, rotated.data());
        codec->ToSketch(rotated.data(), dst);
        break;
      }
    }
  }
  plan.domains.push_back(std::move(domain));
  return static_cast<int>(plan.domains.size()) - 1;
}

constexpr size_t kHeaderPrefetch = 8;  // pages

}  // namespace

StatusOr<Plan> MakePlan(std::span<const KvPageRef> pages, int head_dim, const float* q, int num_q,
                        const AttentionOptions& options) {
  if (num_q < 1) return InvalidArgumentError("attention: need at least one query head");
  if (head_dim < kMinHeadDim || head_dim > kMaxHeadDim || head_dim % 16 != 0) {
    return InvalidArgumentError("attention: unsupported head_dim " + std::to_string(head_dim));
  }
  if (!(options.skip_threshold >= 0.0f) || !(options.scale >= 0.0f) || !(options.softcap >= 0.0f) ||
      !std::isfinite(options.softcap)) {
    return InvalidArgumentError("attention: scale, skip_threshold and softcap must be finite and >= 0");
  }
  Plan plan;
  plan.head_dim = head_dim;
  plan.num_q = num_q;
  plan.scale = options.scale > 0.0f ? options.scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
  plan.softcap = options.softcap;
  plan.pages.reserve(pages.size());
  HeaderMemo k_memo, v_memo;
  for (size_t i = 0; i < pages.size(); ++i) {
    const KvPageRef& ref = pages[i];
    // The headers of a head's pages lie a page apart (1-4 KiB at least), where no hardware prefetcher
    // follows: asked for kHeaderPrefetch pages ahead, their misses overlap instead of coming one after the
    // other.
    if (i + kHeaderPrefetch < pages.size()) {
      __builtin_prefetch(pages[i + kHeaderPrefetch].k);
      __builtin_prefetch(pages[i + kHeaderPrefetch].v);
    }
    PlannedPage page;
    page.k = ref.k;
    page.v = ref.v;
    page.num_tokens = ref.num_tokens;
    page.score_bias = ref.score_bias;
    page.first_bias = ref.first_bias;
    page.first_value = ref.first_value;
    StatusOr<const KvCodec*> kc =
        CodecFor(ref.k, ref.k_format, head_dim, ref.num_tokens, k_memo, &page.k_scale);
    if (!kc.ok()) return kc.status().WithContext("page " + std::to_string(i) + " keys");
    StatusOr<const KvCodec*> vc =
        CodecFor(ref.v, ref.v_format, head_dim, ref.num_tokens, v_memo, &page.v_scale);
    if (!vc.ok()) return vc.status().WithContext("page " + std::to_string(i) + " values");
    page.k_codec = *kc;
    page.v_codec = *vc;
    const std::vector<CodeSegment>& k_segments = page.k_codec->layout().segments;
    const std::vector<CodeSegment>& v_segments = page.v_codec->layout().segments;
    assert(k_segments.size() <= kMaxSegments && v_segments.size() <= kMaxSegments);
    for (size_t s = 0; s < k_segments.size(); ++s) {
      page.k_domains[s] = DomainIndex(plan, page.k_codec, k_segments[s].domain, q);
    }
    for (size_t s = 0; s < v_segments.size(); ++s) {
      page.v_domains[s] = DomainIndex(plan, page.v_codec, v_segments[s].domain, q);
    }
    plan.pages.push_back(std::move(page));
  }
  return plan;
}

void AddFromDomain(const Domain& domain, int head_dim, const float* acc, float* out) {
  std::vector<float> tmp(head_dim, 0.0f);
  switch (domain.kind) {
    case CodeDomain::kPlain:
      std::copy(acc, acc + head_dim, tmp.begin());
      break;
    case CodeDomain::kRotated:
      domain.codec->FromRotated(acc, tmp.data());
      break;
    case CodeDomain::kSketch: {
      std::vector<float> rotated(head_dim, 0.0f);
      domain.codec->AddFromSketch(acc, rotated.data());
      domain.codec->FromRotated(rotated.data(), tmp.data());
      break;
    }
  }
  for (int i = 0; i < head_dim; ++i) out[i] += tmp[i];
}

}  // namespace tq::kernels::attention_internal
