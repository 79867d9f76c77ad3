// The KV of one sequence. Two kinds:
// - plain f32 rows in RAM (format "f32", exact; also the fallback for head dims the page kernels do not support);
// - pages of kernels/formats (f16, int8, tq*): per (layer, KV head) a list of full, encoded pages held by the KV
//   page store (engine/kv/page_store.h: hot, warm and cold tiers by the head's precision class) plus the newest,
//   partly filled page, which stays f16 in the sequence until it holds kPageTokens
//   tokens and is then encoded into the head's K and V formats and handed to the store. Attention runs straight
//   on the pages (kernels/attention); cold pages are read through the store's cache (PrefetchLayer ahead).
//
// Faults: a cold page that cannot be read back (I/O error, checksum) never reaches attention. Attend then writes
// zeros, records the fault (fault()) and returns OK so the batch's other sequences finish their pass; the engine
// recomputes the faulted sequence from its tokens (Reset). A page the tiers have no room for stays in the
// sequence's own memory (overflow_bytes()) and nothing is lost; the scheduler preempts before that happens.
//
// Sources: kv_layout.cc (KvLayout), kv_cache.cc (pages: append, encode, prefix attach, read-ahead),
// kv_attend.cc (attention), kv_cache_demote.cc (demotion), kv_key_offsets.cc (per-page key offsets).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/options.h"
#include "engine/kv/adaptation.h"
#include "engine/kv/page_store.h"
#include "engine/kv/prefix_cache.h"
#include "engine/kv/precision.h"
#include "engine/llm/hparams.h"
#include "engine/kv/kv_key_offsets.h"
#include "kernels/attention/attention.h"
#include "kernels/formats/codec.h"
#include "kernels/formats/format.h"

namespace tq::engine {

struct HeadKvFormat {
  kernels::KvFormat k = kernels::KvFormat::kF16;
  kernels::KvFormat v = kernels::KvFormat::kF16;
  PrecisionClass cls = PrecisionClass::kHot;
};

// What one layer stores. plain = f32 rows (no pages) for every head; otherwise one entry per KV head.
struct LayerKvFormat {
  bool plain = true;
  std::vector<HeadKvFormat> heads;
  KeyRope rope;  // how the layer's keys were rotated (per-page key offsets)
  // Sliding-window layer: a query at p sees (p - window, p]; pages wholly before every future query's window are
  // released (SequenceKv::FinishLayerPass). 0: the layer sees every position.
  int window = 0;
};

// The codecs and per-layer formats shared by every sequence of a model. Immutable after Create.
class KvLayout {
 public:
  static StatusOr<std::shared_ptr<const KvLayout>> Create(const HParams& hp, const KvSpec& spec);

  const LayerKvFormat& layer(int l) const { return layers_[l]; }
  const HeadKvFormat& head(int l, int h) const { return layers_[l].heads[h]; }
  // Heads per class: [hot, active, sparse].
  std::array<int, 3> class_heads() const;
  const kernels::KvCodec& codec(kernels::KvFormat f) const { return *codecs_.at(f); }
  int n_layers() const { return static_cast<int>(layers_.size()); }
  // The largest full page (K + V bytes) of each class [hot, active, sparse]; 0 for a class without heads.
  std::array<uint32_t, 3> class_page_bytes() const;
  // Bytes of full pages per token of a sequence, per class (what the store holds per token).
  std::array<double, 3> class_bytes_per_token() const;
  int n_kv_heads() const { return n_kv_heads_; }
  int head_dim() const { return head_dim_; }
  const KvSpec& spec() const { return spec_; }  // as created (boundary_layers resolved)
  // Bits per value averaged over layers and K/V, norms and scales included (f32 = 32).
  double bits_per_value() const;
  // The same counting whole pages, every byte (PageBitsPerValue: the page header too).
  double page_bits_per_value() const;
  std::string Describe() const;  // "k=tq4 v=tq4, f16 in layers 0-1 and 28-29"
  // Identity of the per-head formats and classes (with the shapes): pages are interchangeable between two
  // layouts with the same fingerprint.
  uint64_t fingerprint() const;
  bool all_paged() const;  // every layer stores pages (no plain f32 layer)

  // Online adaptation (engine/kv/adaptation.h): whether heads may move between ACTIVE and SPARSE (a ranked
  // preset whose ACTIVE and SPARSE keys and values are all compressed, so both classes share a head's transform),
  // and a copy
  // with new classes ([n_layers * n_kv_heads]; the boundary layers stay f16).
  bool adaptable() const;
  std::shared_ptr<const KvLayout> WithClasses(const std::vector<PrecisionClass>& classes) const;
  std::vector<PrecisionClass> classes() const;  // [n_layers * n_kv_heads]

 private:
  std::vector<LayerKvFormat> layers_;
  std::map<kernels::KvFormat, std::shared_ptr<const kernels::KvCodec>> codecs_;
  std::array<HeadKvFormat, 3> class_formats_{};  // ranked presets: the formats of each class
  bool ranked_ = false;                          // a ranked preset (code, longdoc, chat, auto)
  int n_kv_heads_ = 0;
  int head_dim_ = 0;
  KvSpec spec_;
  std::string description_;
};

// Full pages of each class that `n` more tokens after `have` add to one sequence at most (the store's unit), the
// tokens arriving in forward passes of at most `max_pass` tokens each. A sliding-window layer holds at most
// WindowPageCap(window, max_pass) pages at any time (older pages are released one pass late), so it adds no more
// than that, however long the prompt.
std::array<uint64_t, 3> PagesForTokens(const KvLayout& layout, int have, int n, int max_pass);

// Most full pages a layer with a sliding window of `window` positions holds at once per head, passes of at most
// `max_pass` tokens: after the pass ending at E_k it keeps pages from (E_{k-1} - window + 1) / kPage up to
// E_{k+1} / kPage during the next pass, and E_{k+1} - E_{k-1} <= 2 * max_pass.
int WindowPageCap(int window, int max_pass);

// For experiments on the codes (`tqserve eval kld --dump-rows`): called for every page a coded format encodes,
// with its rows [n][head_dim] of side kv (0 = K, 1 = V) as the codec receives them (after the key and value
// transforms and the page's key offset) and that codec. f16 pages are copied, not encoded, and not observed.
// Process-wide: set it before any sequence encodes; it may be called from several threads at once.
using PageRowsObserver =
    std::function<void(int layer, int kv_head, int kv, const kernels::KvCodec& codec, const float* rows, int n)>;
void SetPageRowsObserver(PageRowsObserver observer);

class SequenceKv {
 public:
  // Full pages go to `store` (not owned; outlives the sequence). A layout with only plain layers needs none.
  SequenceKv(std::shared_ptr<const KvLayout> layout, int n_ctx, KvPageStore* store);
  // Plain f32 everywhere (tests and tools that need exact KV).
  SequenceKv(const HParams& hp, int n_ctx);
  ~SequenceKv();
  SequenceKv(const SequenceKv&) = delete;
  SequenceKv& operator=(const SequenceKv&) = delete;

  int n_ctx() const { return n_ctx_; }
  int n_tokens() const { return n_tokens_; }   // positions [0, n_tokens) are filled in every layer
  void set_n_tokens(int n) { n_tokens_ = n; }  // after a forward pass

  // Stores K and V ([n_kv_heads][head_dim] each) of `pos` in `layer`. Positions of a layer come in order:
  // pos == the number of positions the layer holds (OutOfRange past n_ctx; InvalidArgument out of order).
  // q (optional): the position's queries after RoPE, [q_heads][head_dim], a KV head's group of q_heads /
  // n_kv_heads contiguous. Until a head's first page fills, their channel energies are summed; the key scale that
  // page fixes weighs them (FixTransform), so keys are coded where queries look. Without q the scale follows the
  // keys alone.
  Status Append(int layer, int pos, const float* k, const float* v, const float* q = nullptr, int q_heads = 0);

  // Causal attention for `rows` consecutive query positions starting at first_pos, for the `group` query heads
  // of `kv_head`: q and out are [rows][group][head_dim]; row r attends to positions [0, first_pos + r], or with
  // window > 0 to (first_pos + r - window, first_pos + r] (sliding-window layers; pages wholly before the first
  // row's window are not read). The softmax scale is 1/sqrt(head_dim); softcap > 0 caps each scaled score s at
  // softcap * tanh(s / softcap) (Gemma 2). Reports (query, token) pairs scored and skipped.
  Status Attend(int layer, int kv_head, const float* q, int rows, int group, int first_pos, float* out,
                int64_t* scored, int64_t* skipped, int window = 0, float softcap = 0.0f) const;

  // Call once `layer`'s attention of a forward pass is done (the model does, for every sequence of the batch):
  // - a query whose own page filled during the pass saw that page exact, through an f16 copy kept since it was
  //   encoded (the way a decode step sees its own, still f16, tail page: prefill computes what decode would); the
  //   copies go now;
  // - in a sliding-window layer, pages that were wholly before every later query's window already when the previous
  //   pass ended are released (one pass late, so the engine has offered them to the prefix cache first).
  void FinishLayerPass(int layer);

  // Plain (f32) layers report every query's attention weights to `stats` (calibration); null to stop.
  void set_concentration_stats(ConcentrationStats* stats) { stats_ = stats; }

  // Drops every position (pages go back to the store); the sequence starts again at position 0.
  void Reset();
  // The request id its pages carry in the page store's events.
  void set_owner(std::string owner) { owner_ = std::move(owner); }
  // Unique in the process; its pages carry it (PageInfo::sequence) and their disk streams derive from it.
  SequenceId id() const { return id_; }

  // Prefix cache (engine/kv/prefix_cache.h). The chain hash of page `page_index` (and its parent's), recorded
  // with the page when it fills; set before the tokens that fill it are appended.
  void SetPageHash(int page_index, uint64_t hash, uint64_t parent);
  // Pages every paged (layer, KV head) has filled.
  int full_pages() const;
  // Page ids of page `page_index`: [n_layers * n_kv_heads]; 0 where a page is not in the store.
  std::vector<PageId> PageIdsAt(int page_index) const;
  // Each head's transform (fixed by its first page), [n_layers * n_kv_heads].
  std::vector<HeadTransform> Transforms() const;
  // Online adaptation: the layout whose formats the next full pages take (same shapes), and re-encoding of the
  // full pages of one head down to its current formats (pages with fewer bits stay as they are). Engine thread,
  // outside attention.
  void SetLayout(std::shared_ptr<const KvLayout> layout) { layout_ = std::move(layout); }
  Status Demote(int layer, int kv_head);
  // Attention reports each (layer, KV head)'s scored and skipped (query, token) pairs here; null to stop.
  void set_activity(HeadActivity* activity) { activity_ = activity; }

  // Starts an empty sequence with cached pages: entries[k] is page k; the sequence then holds
  // 128 * entries.size() positions and its own reference on each page. The layout must be all_paged().
  Status AttachPrefix(std::span<const PrefixEntry* const> entries);
  // Starts reading the cold pages of `layer` (prefetch ahead of attention). Engine thread, outside attention.
  // from_position > 0: pages that end at or before it are not wanted (a sliding-window layer's old pages).
  // Heads in order, pages in order, while their bytes stay within max_bytes (KvPageStore::Prefetch: the
  // bytes taken and whether that was all of the layer's cold pages).
  KvPageStore::PrefetchResult PrefetchLayer(int layer, int from_position = 0, uint64_t max_bytes = UINT64_MAX) const;
  // Bytes of cold pages worth reading ahead (KvPageStore::ReadAheadBytes); 0 without a cold tier.
  uint64_t ReadAheadBytes() const;
  // The first fault since the last Reset (OK when none): a cold page that could not be read back.
  Status fault() const;
  uint64_t overflow_bytes() const { return overflow_bytes_; }

  uint64_t bytes() const;  // KV memory held: rows or pages, f16 tails and this pass's exact copies included
  // Encoded page bytes per precision class [hot, active, sparse]; the f16 tail pages and f32 rows count as hot.
  std::array<uint64_t, 3> bytes_by_class() const;

 private:
  struct HeadPages;  // the pages of one (layer, KV head)
  Status EncodeFullPage(int layer, int head, HeadPages& hp);
  // k_rows, v_rows: the first page's rows [kPage][head_dim], moved into the new domain in place.
  void FixTransform(int layer, const HeadKvFormat& f, HeadPages& hp, float* k_rows, float* v_rows);
  // Page `page_index`'s key offset from the head's k_mean (raw key space, [head_dim]); hp.xf.k_rope_mean is set.
  void KeyOffset(int layer, const HeadPages& hp, int page_index, float* out) const;

  void RecordFault(const Status& status) const;
  // The parts of Attend: plain f32 rows; per-page score biases (key offsets, sink); the kernel over row groups.
  void AttendPlain(int layer, int kv_head, const float* q, int rows, int group, int first_pos, float* out,
                   int64_t* scored, int window, float softcap) const;
  void AddScoreBiases(const HeadPages& hp, size_t skip_pages, const float* q, int nq,
                      std::vector<kernels::KvPageRef>& refs) const;
  Status AttendRowGroups(const HeadPages& hp, const std::vector<kernels::KvPageRef>& refs, size_t skip_pages,
                         const float* q, const float* q_raw, int rows, int group, int first_pos,
                         int kernel_first_pos, int window, float softcap, float* out, std::vector<uint8_t>& raw_rows,
                         kernels::AttentionStats* stats) const;

  std::shared_ptr<const KvLayout> layout_;  // null: plain f32
  KvPageStore* store_ = nullptr;
  ConcentrationStats* stats_ = nullptr;
  HeadActivity* activity_ = nullptr;
  mutable std::mutex fault_mu_;
  mutable Status fault_;
  uint64_t overflow_bytes_ = 0;
  std::string owner_;
  std::vector<std::pair<uint64_t, uint64_t>> page_hashes_;  // [page index] -> (hash, parent hash)
  int n_ctx_;
  int n_layers_;
  int n_kv_heads_;
  int head_dim_;
  int n_tokens_ = 0;
  std::vector<int> layer_len_;                   // positions stored per layer
  std::vector<int> pass_end_len_;                // layer_len_ when the layer's last pass finished (FinishLayerPass)
  std::vector<std::vector<float>> plain_;        // plain layers: [2][n_ctx-as-needed][n_kv][head_dim] per layer
  std::vector<std::vector<HeadPages>> pages_;    // paged layers: [layer][kv_head]
  SequenceId id_;
};

}  // namespace tq::engine
