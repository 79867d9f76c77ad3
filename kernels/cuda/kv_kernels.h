// The KV kernels on the GPU: page encoding and attention straight on the packed pages, with the formats and the
// semantics of the CPU kernels (kernels/formats, kernels/attention), which are their reference.
//
// Attention is planned on the host and run on one stream:
//   1. a plan: every (query, page) pair whose tokens the query attends to becomes one thread block of 128 threads
//      (one thread per token of the page), the tail of f32 rows one more; every query's V formats get a slot in
//      its accumulators;
//   2. the queries are transformed into the code domain of every rotated K format of the call (A q, A the dense
//      [head_dim][head_dim] matrix of the domain);
//   3. each block scores its tokens from their codes (norm * sum q'_i * table[code_i]; halfs for f16; scale times
//      the int8 codes), takes a page-local softmax and accumulates the values in their page's domain;
//   4. one block per (query, query head) merges the pages (flash-decoding) and maps each domain back (A^T acc).
// Prefill is the same call with one GpuQuery per row, `limit` = the row's position + 1 (causal mask).
// Values are never skipped (the CPU kernels' skip threshold saves arithmetic, not memory traffic), so the result
// is that of the CPU reference with skip_threshold = 0, up to f32 rounding.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "kernels/cuda/kv_codecs.h"
#include "kernels/cuda/runtime.h"

namespace tq::gpu {

// Encodes pages of one codec on the GPU. x: device [n_pages] blocks of x_page_stride floats, each
// [n_tokens][head_dim] f32; pages: device array of n_pages device page pointers (each desc.page_bytes bytes).
// The bytes, header included, are those of KvCodec::EncodePageReference (int8 without the robust clamp).
// bad_input: device int, may be null; set to 1 if an int8 page held a non-finite value (its page is then not
// usable). 1 <= n_tokens <= kPageTokens. rule: what TurboQuant norms keep exact (kernels::NormRule; values use
// kInnerProduct, as the CPU path does).
Status EncodePages(const DeviceCodecs& codecs, int codec, const float* x, int64_t x_page_stride, int n_tokens,
                   uint8_t* const* pages, int n_pages, int* bad_input, cudaStream_t stream,
                   kernels::NormRule rule = kernels::NormRule::kLength);

// One page of keys and the page of values for the same tokens. k, v: device page bytes, encoded (headers valid).
struct GpuPage {
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
  int32_t k_codec = 0;   // DeviceCodecs index
  int32_t v_codec = 0;
  int32_t num_tokens = 0;
};

// One query token of one KV head: its `group` query heads attend to the first `limit` tokens of its pages
// (in order) followed by its tail rows.
struct GpuQuery {
  const float* q = nullptr;   // device [group][head_dim]
  float* out = nullptr;       // device [group][head_dim]
  int32_t first_page = 0;     // into the call's page table
  int32_t num_pages = 0;
  const float* tail_k = nullptr;  // device [tail_tokens][head_dim] f32; may be null when tail_tokens is 0
  const float* tail_v = nullptr;
  int32_t tail_tokens = 0;        // <= kPageTokens
  int32_t limit = 0;              // tokens attended; the total when larger
};

// Reusable host and device buffers of attention calls on one stream. Not thread-safe.
class PagedAttention {
 public:
  // q: [group][head_dim] per query; scale: the softmax scale (0: 1 / sqrt(head_dim)). pages and queries are host
  // arrays holding device pointers. InvalidArgument for a bad call (unknown codec, head_dim mismatch, a page range
  // outside the table, group > kMaxGroup, more than kMaxCallCodecs rotated V formats in one call). Asynchronous:
  // the results are ready when `stream` is.
  Status Run(const DeviceCodecs& codecs, std::span<const GpuPage> pages, std::span<const GpuQuery> queries,
             int head_dim, int group, float scale, cudaStream_t stream);

  // Blocks of the last plan (work items: splits of consecutive pages of one query, and tails).
  int64_t last_blocks() const { return last_blocks_; }

 private:
  std::vector<uint8_t> plan_bytes_;      // this call's plan
  std::vector<uint8_t> uploaded_bytes_;  // the plan now in plan_ (uploads are skipped while it is unchanged)
  PinnedBuffer host_plan_;   // staging of the plan for the upload
  Event uploaded_;           // the last upload from host_plan_ finished (host_plan_ may be rewritten)
  bool pending_ = false;
  DeviceBuffer plan_;        // the uploaded plan
  DeviceBuffer qdom_;        // transformed queries
  DeviceBuffer partials_;    // per block: m, l, acc
  int64_t last_blocks_ = 0;
  int sms_ = 0;  // multiprocessors of the device (splits are sized to fill it)
};

}  // namespace tq::gpu
