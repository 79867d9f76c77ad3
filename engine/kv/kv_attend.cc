// SequenceKv's attention: over plain f32 rows, or over the pages (the store's full pages, pinned from their
// tiers, and the f16 tail) by the page kernels, with the score biases of key offsets and sinks.
#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_cache_pages.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include <spdlog/spdlog.h>

#include "kernels/attention/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/formats/fp16.h"

namespace tq::engine {
namespace {

using kernels::KvFormat;

constexpr int kPage = kernels::kPageTokens;

}  // namespace

void SequenceKv::AttendPlain(int layer, int kv_head, const float* q, int rows, int group, int first_pos, float* out,
                             int64_t* scored, int window, float softcap) const {
  const int d = head_dim_;
  const size_t row = static_cast<size_t>(n_kv_heads_) * d;
  const float* data = plain_[layer].data();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> scores(first_pos + rows);
  for (int r = 0; r < rows; ++r) {
    const int last = first_pos + r;
    for (int g = 0; g < group; ++g) {
      const float* qv = q + (static_cast<size_t>(r) * group + g) * d;
      float* o = out + (static_cast<size_t>(r) * group + g) * d;
      const int begin = window > 0 ? std::max(0, last - window + 1) : 0;  // scores[t] = 0 before the window
      float max_score = -INFINITY;
      std::fill(scores.begin(), scores.begin() + begin, 0.0f);
      for (int t = begin; t <= last; ++t) {
        scores[t] = kernels::DotF32(qv, data + (2 * static_cast<size_t>(t)) * row + kv_head * d, d) * scale;
        if (softcap > 0.0f) scores[t] = softcap * std::tanh(scores[t] / softcap);
        max_score = std::max(max_score, scores[t]);
      }
      double sum = 0;
      for (int t = begin; t <= last; ++t) {
        scores[t] = std::exp(scores[t] - max_score);
        sum += scores[t];
      }
      std::fill(o, o + d, 0.0f);
      const float inv = static_cast<float>(1.0 / sum);
      if (stats_ != nullptr) {
        for (int t = begin; t <= last; ++t) scores[t] *= inv;
        stats_->Add(layer, kv_head, scores.data(), last + 1);
        for (int t = begin; t <= last; ++t) scores[t] /= inv;
      }
      for (int t = begin; t <= last; ++t) {
        kernels::AxpyF32(scores[t] * inv, data + (2 * static_cast<size_t>(t) + 1) * row + kv_head * d, o, d);
      }
      if (scored) *scored += last + 1 - begin;
    }
  }
}

// Score biases for pages [skip_pages, ...) of a head with per-page key offsets: q . offset for each page's keys
// (raw space; kv_cache_pages.h) and q . k_sink for token 0. refs[p] is page skip_pages + p; q is [nq][head_dim].
void SequenceKv::AddScoreBiases(const HeadPages& hp, size_t skip_pages, const float* q, int nq,
                                std::vector<kernels::KvPageRef>& refs) const {
  const int d = head_dim_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const size_t n_pages = hp.full.size() - skip_pages;
  thread_local std::vector<float> biases;  // [n_pages + 1][nq]; the last row is the sink's
  biases.assign((n_pages + 1) * nq, 0.0f);
  for (size_t p = 0; p < n_pages; ++p) {
    const float* off = hp.k_offsets.data() + (skip_pages + p) * d;
    float* b = biases.data() + p * nq;
    for (int j = 0; j < nq; ++j) b[j] = kernels::DotF32(q + static_cast<size_t>(j) * d, off, d) * scale;
    refs[p].score_bias = b;
  }
  if (skip_pages == 0 && n_pages > 0 && !hp.xf.k_sink.empty()) {
    float* b = biases.data() + n_pages * nq;
    for (int j = 0; j < nq; ++j) b[j] = kernels::DotF32(q + static_cast<size_t>(j) * d, hp.xf.k_sink.data(), d) * scale;
    refs[0].first_bias = b;
  }
}

// The attention kernel over `refs`, in groups of rows: the rows of a page with an exact copy (filled in this
// pass) attend to the coded pages before it and to the copy; the other rows to every page. q is in the keys'
// domain (q * k_scale) and q_raw as the model gave it; out is in the values' domain (divided by v_scale) except
// for the rows of a raw copy, which see the first page's rows untransformed (raw_rows[r] = 1 for them).
Status SequenceKv::AttendRowGroups(const HeadPages& hp, const std::vector<kernels::KvPageRef>& refs,
                                   size_t skip_pages, const float* q, const float* q_raw, int rows, int group,
                                   int first_pos, int kernel_first_pos, int window, float softcap, float* out,
                                   std::vector<uint8_t>& raw_rows, kernels::AttentionStats* stats) const {
  const int d = head_dim_;
  kernels::AttentionOptions options;
  options.window = window;
  options.softcap = softcap;
  raw_rows.assign(static_cast<size_t>(rows), 0);
  // Per-query biases move with the group's first row.
  thread_local std::vector<kernels::KvPageRef> group_refs;
  for (int r = 0; r < rows;) {
    const int page = (first_pos + r) / kPage;
    const HeadPages::ExactCopy* copy = nullptr;
    for (const HeadPages::ExactCopy& c : hp.exact_copies) {
      if (c.page == page) copy = &c;
    }
    int n = rows - r;
    if (copy != nullptr) {
      n = std::min(n, (page + 1) * kPage - (first_pos + r));
    } else {
      for (const HeadPages::ExactCopy& c : hp.exact_copies) {
        if (c.page > page) n = std::min(n, c.page * kPage - (first_pos + r));
      }
    }
    const size_t n_refs = copy != nullptr ? static_cast<size_t>(page) - skip_pages : refs.size();
    group_refs.assign(refs.begin(), refs.begin() + n_refs);
    const size_t shift = static_cast<size_t>(r) * group;
    for (kernels::KvPageRef& ref : group_refs) {
      if (ref.score_bias != nullptr) ref.score_bias += shift;
      if (ref.first_bias != nullptr) ref.first_bias += shift;
    }
    if (copy != nullptr) group_refs.push_back({copy->k.data(), copy->v.data(), KvFormat::kF16, KvFormat::kF16, kPage});
    // A raw copy is the only page its rows see (page 0: no coded page before it).
    const bool raw = copy != nullptr && copy->raw;
    if (raw) std::fill(raw_rows.begin() + r, raw_rows.begin() + r + n, uint8_t{1});
    const size_t offset = shift * d;
    TQ_RETURN_IF_ERROR(kernels::PrefillAttention(group_refs, d, (raw ? q_raw : q) + offset, n, group,
                                                 kernel_first_pos + r, options, out + offset, stats));
    r += n;
  }
  return Status::Ok();
}

Status SequenceKv::Attend(int layer, int kv_head, const float* q, int rows, int group, int first_pos, float* out,
                          int64_t* scored, int64_t* skipped, int window, float softcap) const {
  const int d = head_dim_;
  if (first_pos + rows > layer_len_[layer]) {
    return InternalError("attention past the stored positions of layer " + std::to_string(layer));
  }
  if (!layout_ || layout_->layer(layer).plain) {
    AttendPlain(layer, kv_head, q, rows, group, first_pos, out, scored, window, softcap);
    return Status::Ok();
  }
  const HeadPages& hp = pages_[layer][kv_head];
  std::vector<kernels::KvPageRef> refs;
  refs.reserve(hp.full.size() + 1);
  // Sliding window: full pages that end before the first row's window are left out (positions shift with them).
  const size_t skip_pages =
      window > 0 ? std::min(hp.full.size(), static_cast<size_t>(std::max(0, first_pos - window + 1) / kPage)) : 0;
  if (skip_pages < hp.released_pages) {
    return InternalError("attention of layer " + std::to_string(layer) + " from position " +
                         std::to_string(first_pos) + " needs pages released from its sliding window");
  }
  const int kernel_first_pos = first_pos - static_cast<int>(skip_pages) * kPage;
  // The cold pages (no RAM bytes) pinned together: one visit of the cold cache per head and layer, or none
  // where the last step's pins are still held (HeadPages::ColdHolds). `pins` keeps their bytes alive until
  // the kernel is done.
  thread_local std::vector<PageId> cold_ids;
  thread_local std::vector<PinnedPage> local_pins;
  cold_ids.clear();
  for (size_t pi = skip_pages; pi < hp.full.size(); ++pi) {
    if (hp.full[pi].ram == nullptr) cold_ids.push_back(hp.full[pi].id);
  }
  std::unique_lock<std::mutex> holds_lock(*hp.holds_mu, std::defer_lock);
  HeadPages::ColdHolds* holds = !cold_ids.empty() && holds_lock.try_lock() ? &hp.holds : nullptr;
  std::vector<PinnedPage>& pins = holds != nullptr ? holds->pins : local_pins;
  bool keep = false;  // pins stay held after this Attend
  size_t held = 0;    // pins[0, held) are held from the Attend before
  if (holds != nullptr) {
    const uint64_t epoch = store_->cold_hold_epoch();
    keep = epoch == holds->epoch;
    if (keep && !holds->pins.empty() && holds->ids.size() <= cold_ids.size() &&
        std::equal(holds->ids.begin(), holds->ids.end(), cold_ids.begin())) {
      held = holds->ids.size();
    } else {
      holds->Drop();
    }
    holds->epoch = epoch;
    holds->ids.assign(cold_ids.begin(), cold_ids.end());
  }
  struct Release {  // at every return: the pins not kept let go
    std::vector<PinnedPage>& pins;
    const bool& keep;
    ~Release() {
      if (!keep) pins.clear();
    }
  } release{pins, keep};
  if (held > 0) store_->CountHeld(held);
  pins.resize(cold_ids.size());
  if (held < cold_ids.size()) {
    const std::span<const PageId> ids = std::span<const PageId>(cold_ids).subspan(held);
    if (Status pinned = store_->PinMany(ids, std::span<PinnedPage>(pins).subspan(held)); !pinned.ok()) {
      RecordFault(pinned.WithContext("KV page of layer " + std::to_string(layer) + ", head " +
                                     std::to_string(kv_head)));
      std::fill(out, out + static_cast<size_t>(rows) * group * d, 0.0f);
      keep = false;
      if (holds != nullptr) holds->Drop();
      return Status::Ok();
    }
  }
  size_t next_pin = 0;
  for (size_t pi = skip_pages; pi < hp.full.size(); ++pi) {
    const HeadPages::Full& page = hp.full[pi];
    const uint8_t* data = page.ram;
    if (data == nullptr) data = pins[next_pin++].data;
    refs.push_back({data, data + kernels::PageBytes(page.k, d).value(), page.k, page.v, kPage});
  }
  if (hp.tail_tokens > 0) {
    refs.push_back({hp.k_tail.data(), hp.v_tail.data(), KvFormat::kF16, KvFormat::kF16, hp.tail_tokens});
  }
  if (!hp.xf.k_rope_mean.empty()) AddScoreBiases(hp, skip_pages, q, rows * group, refs);
  if (skip_pages == 0 && !hp.full.empty() && !hp.xf.v_sink.empty()) refs[0].first_value = hp.xf.v_sink.data();
  kernels::AttentionStats stats;
  const float* q_raw = q;
  thread_local std::vector<float> qs;  // the query in the keys' domain: q * k_scale
  if (!hp.xf.k_scale.empty()) {
    qs.assign(q, q + static_cast<size_t>(rows) * group * d);
    for (size_t r = 0; r < qs.size(); r += d) {
      for (int i = 0; i < d; ++i) qs[r + i] *= hp.xf.k_scale[i];
    }
    q = qs.data();
  }
  thread_local std::vector<uint8_t> raw_rows;  // [rows]: 1 = the row saw a raw copy, its output is not scaled
  TQ_RETURN_IF_ERROR(AttendRowGroups(hp, refs, skip_pages, q, q_raw, rows, group, first_pos, kernel_first_pos,
                                     window, softcap, out, raw_rows, &stats));
  if (!hp.xf.v_scale.empty()) {
    for (int r = 0; r < rows; ++r) {
      if (raw_rows[static_cast<size_t>(r)] != 0) continue;
      for (size_t j = static_cast<size_t>(r) * group * d; j < static_cast<size_t>(r + 1) * group * d; j += d) {
        for (int i = 0; i < d; ++i) out[j + i] *= hp.xf.v_scale[i];
      }
    }
  }
  if (scored) *scored += stats.scored;
  if (skipped) *skipped += stats.skipped;
  if (activity_ != nullptr) activity_->Add(layer, kv_head, stats.scored, stats.skipped);
  return Status::Ok();
}

}  // namespace tq::engine
