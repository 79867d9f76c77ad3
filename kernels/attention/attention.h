// Attention straight on KV pages, for one KV head and its group of query heads (GQA).
//
// Keys and values stay in their page formats; nothing is dequantized into a copy of the cache:
// - the query is transformed once per code domain (rotated for tq pages, additionally QJL-sketched for tq*p pages);
// - a key's score is computed from its packed codes: norm * sum_i q'_i * table[code_i] (scale for int8, halfs
//   for f16);
// - values are accumulated in their page's domain (o' += p_t * norm_t * table[codes_t]) and transformed back once
//   per domain at the end; f16/int8 (plain) and tq (rotated) pages may be mixed freely;
// - per-page and first-token score biases (KvPageRef) are added to the scaled scores before the softmax;
// - an online softmax merges the pages (flash-decoding style);
// - value accumulation is skipped where exp(s - m) < skip_threshold, m the running maximum score; since the final
//   weight exp(s - m_final) / sum <= exp(s - m), every skipped (query head, token) pair has final weight below
//   the threshold. Skipped pairs are counted.
//
// DecodeAttention picks the best SIMD target once per call (Highway dynamic dispatch); the *Reference functions are
// the scalar reference it is tested against, kept forever.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "kernels/formats/format.h"

namespace tq::kernels {

// One page of keys and the page of values for the same tokens (their formats may differ).
struct KvPageRef {
  const uint8_t* k = nullptr;  // page bytes, header first; at least PageBytes(k_format, head_dim)
  const uint8_t* v = nullptr;
  KvFormat k_format = KvFormat::kF16;
  KvFormat v_format = KvFormat::kF16;
  int num_tokens = 0;          // valid tokens; <= both headers' num_tokens
  // Optional score biases, in score units (added after the softmax scale), for callers that store keys relative
  // to a per-page offset or keep a correction for one token (engine/kv/kv_cache.cc):
  const float* score_bias = nullptr;   // [num_q]: added to the score of every token of this page, per query
  const float* first_bias = nullptr;   // [num_q]: added to the score of this page's token 0, per query
  // [head_dim] or null: added to this page's token 0's value (in the space DecodePage gives), with that token's
  // attention weight (whether or not its value accumulation was skipped).
  const float* first_value = nullptr;
};

struct AttentionOptions {
  float scale = 0.0f;            // softmax scale; 0 means 1 / sqrt(head_dim)
  float skip_threshold = 1e-6f;  // 0 disables skipping
  // Sliding window: > 0, a query at position p attends only to positions in (p - window, p]; 0: all positions.
  // Pages wholly before the window are not read.
  int window = 0;
  // Score soft-capping (Gemma 2's attn_logit_softcapping): > 0, each score s (scaled, with its biases) becomes
  // softcap * tanh(s / softcap) before the softmax; 0: none.
  float softcap = 0.0f;
};

struct AttentionStats {
  int64_t scored = 0;   // (query head, token) pairs scored
  int64_t skipped = 0;  // of those, pairs whose value accumulation was skipped
};

// Decode: q and out are [num_q][head_dim] (the query heads of one KV head's group); every query attends to all
// tokens of `pages`, in order. InvalidArgument / DataLoss for bad pages (wrong format, corrupt header, too many
// tokens). With no tokens the output is zero. `stats` may be null.
Status DecodeAttention(std::span<const KvPageRef> pages, int head_dim, const float* q, int num_q,
                       const AttentionOptions& options, float* out, AttentionStats* stats);
Status DecodeAttentionReference(std::span<const KvPageRef> pages, int head_dim, const float* q, int num_q,
                                const AttentionOptions& options, float* out, AttentionStats* stats);

// Prefill: q and out are [rows][group][head_dim]. Tokens of `pages` have positions 0, 1, ... in page order; row r
// is at position first_position + r and attends to tokens at positions <= its own (causal mask).
Status PrefillAttention(std::span<const KvPageRef> pages, int head_dim, const float* q, int rows, int group,
                        int first_position, const AttentionOptions& options, float* out, AttentionStats* stats);
Status PrefillAttentionReference(std::span<const KvPageRef> pages, int head_dim, const float* q, int rows,
                                 int group, int first_position, const AttentionOptions& options, float* out,
                                 AttentionStats* stats);

}  // namespace tq::kernels
