// SequenceKv's storage of one (layer, KV head), shared by kv_cache.cc and kv_cache_demote.cc only.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/kv/kv_cache.h"
#include "kernels/formats/codec.h"

namespace tq::engine {

// How K (kv 0) and V (kv 1) pages code their norms (kernels::NormRule): values keep each vector's component along
// itself exact, so the weighted sum attention takes of them has no common shortfall; keys keep their length.
constexpr kernels::NormRule PageNormRule(int kv) {
  return kv == 1 ? kernels::NormRule::kInnerProduct : kernels::NormRule::kLength;
}

// Full pages live in the page store (K bytes then V bytes); the tail page is f16, read by attention as it grows and
// decoded to f32 once to encode the page when it fills (no f32 copy is kept: 2 bytes per value until then).
struct SequenceKv::HeadPages {
  struct Full {
    PageId id = kNoPage;          // in the store; kNoPage = overflow (the sequence's own memory)
    const uint8_t* ram = nullptr;  // the bytes when in RAM (a RAM tier or overflow); null = cold, Pin it
    kernels::KvFormat k = kernels::KvFormat::kF16;   // the page's formats (a head's pages differ after a demotion)
    kernels::KvFormat v = kernels::KvFormat::kF16;
    bool released = false;        // left a sliding window: no bytes, never read again (kNoPage, ram null)
  };
  std::vector<Full> full;         // [page index]; released pages keep their place
  size_t released_pages = 0;      // full[0, released_pages) are released
  std::vector<uint8_t> k_tail, v_tail;  // f16 pages
  HeadTransform xf;                     // fixed when the first page fills (FixTransform); empty before
  // Until then, the queries Append was given for this head's group: per channel the sum of q_i^2 over the
  // group's heads and tokens, [head_dim] (empty when none were given), and how many query rows it holds.
  std::vector<double> q_energy;
  int64_t q_rows = 0;
  // Outlier formats (tq2.5, tq3.5): the head's own codec, its outlier channels calibrated on the first page it
  // encodes in that format (KvCodec::Train; each page's header records its set). Null: the layout's codec.
  std::shared_ptr<const kernels::KvCodec> k_codec, v_codec;
  // With xf.k_rope_mean: full page p's keys are coded as (k - k_mean - offset_p) / k_scale, offset_p =
  // k_offsets[p * head_dim ..] (KeyOffset), and attention adds q . offset_p to the page's scores.
  std::vector<float> k_offsets;         // [full pages][head_dim]
  std::deque<std::vector<uint8_t>> overflow;  // pages no tier had room for
  int tail_tokens = 0;
  // Read-ahead memo (PrefetchLayer): every cold page of full[from, to) was taken by the cold cache (cached or
  // being read) when its removal count was `removals`, `bytes` in all; while the count is unchanged they
  // still are, and only pages past `to` need asking for. removals = UINT64_MAX: nothing known.
  struct Prefetched {
    uint64_t removals = UINT64_MAX;
    size_t from = 0, to = 0;
    uint64_t bytes = 0;
  };
  mutable Prefetched prefetched;
  // Cold pages attention keeps pinned from one step to the next. Pinning visits the cold cache for every page
  // (hash lookups, the eviction list, a reference count: ~150-250 ns of cache misses each, 5760 pages a step
  // at 8k context for the default model); held pins are read as they are. They are kept only while the
  // store's cold_hold_epoch stays as it was at the Attend before, so a cache that evicts every step (a
  // working set larger than it) never has pages held, and a cache whose eviction finds held pages in its way
  // gets them back at each head's next Attend. One Attend at a time uses them (holds_mu, tried: chunks of one
  // sequence's prefill may attend to the same head at once, and the others pin as before).
  struct ColdHolds {
    uint64_t epoch = UINT64_MAX;   // cold_hold_epoch at the last Attend
    std::vector<PageId> ids;       // the cold pages pinned then, in order
    std::vector<PinnedPage> pins;  // pins[i] holds ids[i]; empty when not held
    void Drop() {
      ids.clear();
      pins.clear();
    }
  };
  mutable ColdHolds holds;
  std::unique_ptr<std::mutex> holds_mu = std::make_unique<std::mutex>();
  // Exact f16 copies (the tail's bytes: no key offset, no sink) of compressed pages that filled during the current
  // forward pass. Attention lets a query see its own page through them, as a decode step sees its own tail page, so
  // prefill computes what token-by-token decode computes, bit for bit, wherever the passes start and end (the
  // prefix cache keeps the pages a prefill made, so they must not depend on how the batch cut it). The first
  // page's tail holds raw rows (the transform is fixed from them when it fills), and so does its copy: its queries
  // see the same bytes as the passes before the page filled did, with the query and output untransformed.
  // Dropped after the layer's attention (FinishLayerPass).
  struct ExactCopy {
    int page = 0;                  // index into `full`
    bool raw = false;              // page 0: raw rows (no k_mean, k_scale, v_scale)
    std::vector<uint8_t> k, v;     // f16 pages of kPage tokens
  };
  std::vector<ExactCopy> exact_copies;
};

// A sink correction: (exact - what `page` codes for its token 0) * scale, [head_dim]; scale null means 1. `exact` is
// token 0's row in the page's coded space.
StatusOr<std::vector<float>> SinkDifference(const kernels::KvCodec& codec, std::span<const uint8_t> page,
                                            const float* exact, const std::vector<float>* scale);

}  // namespace tq::engine
