// Preparation shared by the reference and SIMD attention: validated pages with their codecs, and the code domains
// (plain, rotated, sketch) with the query transformed into each. Internal to kernels/attention.
#pragma once

#include <array>
#include <span>
#include <vector>

#include "common/status.h"
#include "kernels/attention/attention.h"
#include "kernels/formats/codec.h"
#include "kernels/formats/page.h"

namespace tq::kernels::attention_internal {

// Segments per CodeLayout: at most two (outlier formats: outliers and the rest; tq*p: MSE code and QJL signs).
inline constexpr size_t kMaxSegments = 2;

struct PlannedPage {
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
  const KvCodec* k_codec = nullptr;
  const KvCodec* v_codec = nullptr;
  float k_scale = 0.0f;  // the page header's scale: int8 values, compact formats' norms (norm = code * scale)
  float v_scale = 0.0f;
  int num_tokens = 0;
  const float* score_bias = nullptr;  // [num_q] or null (KvPageRef)
  const float* first_bias = nullptr;  // [num_q] or null
  const float* first_value = nullptr;  // [head_dim] or null
  std::array<int, kMaxSegments> k_domains = {};  // per K segment: index into Plan::domains
  std::array<int, kMaxSegments> v_domains = {};  // per V segment
};

// One vector space that codes live in. The plain domain has codec == nullptr.
struct Domain {
  const KvCodec* codec = nullptr;
  CodeDomain kind = CodeDomain::kPlain;
  std::vector<float> q;  // [num_q][head_dim]: the queries transformed into this domain
};

struct Plan {
  int head_dim = 0;
  int num_q = 0;
  float scale = 0.0f;
  float softcap = 0.0f;  // AttentionOptions::softcap
  std::vector<PlannedPage> pages;
  std::vector<Domain> domains;
};

// Validates the pages (headers, formats, token counts) and transforms q: [num_q][head_dim] into every domain used.
StatusOr<Plan> MakePlan(std::span<const KvPageRef> pages, int head_dim, const float* q, int num_q,
                        const AttentionOptions& options);

// out[head_dim] += the original-domain vector of domain-space vector `acc`[head_dim].
void AddFromDomain(const Domain& domain, int head_dim, const float* acc, float* out);

}  // namespace tq::kernels::attention_internal
