#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_cache_pages.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <deque>

#include <spdlog/spdlog.h>

#include "common/fnv.h"
#include "kernels/attention/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/formats/fp16.h"

namespace tq::engine {
namespace {

using kernels::KvFormat;

constexpr int kPage = kernels::kPageTokens;

}  // namespace
SequenceKv::SequenceKv(std::shared_ptr<const KvLayout> layout, int n_ctx, KvPageStore* store)
    : layout_(std::move(layout)),
      store_(store),
      n_ctx_(n_ctx),
      n_layers_(layout_->n_layers()),
      n_kv_heads_(layout_->n_kv_heads()),
      head_dim_(layout_->head_dim()),
      layer_len_(n_layers_, 0),
      pass_end_len_(n_layers_, 0),
      plain_(n_layers_),
      pages_(n_layers_),
      id_(NextSequenceId()) {
  for (int l = 0; l < n_layers_; ++l) {
    if (!layout_->layer(l).plain) pages_[l].resize(n_kv_heads_);
  }
}

SequenceKv::SequenceKv(const HParams& hp, int n_ctx)
    : n_ctx_(n_ctx),
      n_layers_(hp.n_layers),
      n_kv_heads_(hp.n_kv_heads),
      head_dim_(hp.head_dim),
      layer_len_(n_layers_, 0),
      pass_end_len_(n_layers_, 0),
      plain_(n_layers_),
      pages_(n_layers_),
      id_(NextSequenceId()) {}

SequenceKv::~SequenceKv() { Reset(); }

void SequenceKv::Reset() {
  for (auto& layer : pages_) {
    for (HeadPages& h : layer) {
      for (const HeadPages::Full& f : h.full) {
        if (f.id != kNoPage && store_ != nullptr) store_->Release(f.id);
      }
      h = HeadPages();
    }
  }
  for (auto& p : plain_) std::vector<float>().swap(p);
  std::fill(layer_len_.begin(), layer_len_.end(), 0);
  std::fill(pass_end_len_.begin(), pass_end_len_.end(), 0);
  n_tokens_ = 0;
  overflow_bytes_ = 0;
  page_hashes_.clear();
  std::lock_guard<std::mutex> lock(fault_mu_);
  fault_ = Status::Ok();
}

uint64_t SequenceKv::ReadAheadBytes() const { return store_ != nullptr ? store_->ReadAheadBytes() : 0; }

KvPageStore::PrefetchResult SequenceKv::PrefetchLayer(int layer, int from_position, uint64_t max_bytes) const {
  if (store_ == nullptr || !store_->has_cold_tier() || layer < 0 || layer >= n_layers_) return {};
  // Read before the requests: a page leaving the cache while they run changes it, and the memo is stale then.
  const uint64_t removals = store_->cold_removals();
  thread_local std::vector<PageId> ids;
  const size_t first_page = static_cast<size_t>(std::max(0, from_position) / kPage);
  KvPageStore::PrefetchResult all;
  // Head by head, in page order, within one budget. A head whose pages the cache took before asks only for
  // its newer ones: with the working set cached, a step makes no lookups here (two hash lookups per cold page
  // per step, each a cache miss while attention streams the KV).
  for (const HeadPages& h : pages_[layer]) {
    const size_t from = std::max(first_page, h.released_pages), to = h.full.size();
    HeadPages::Prefetched& memo = h.prefetched;
    const bool known = memo.removals == removals && memo.from == from && memo.to <= to &&
                       memo.bytes <= max_bytes - all.bytes;
    const size_t start = known ? memo.to : from;
    const uint64_t known_bytes = known ? memo.bytes : 0;
    ids.clear();
    for (size_t p = start; p < to; ++p) {
      if (h.full[p].ram == nullptr) ids.push_back(h.full[p].id);
    }
    KvPageStore::PrefetchResult r;
    if (!ids.empty()) r = store_->Prefetch(ids, max_bytes - all.bytes - known_bytes);
    all.bytes += known_bytes + r.bytes;
    if (!r.complete) {
      memo = {};
      all.complete = false;
      return all;
    }
    memo = {removals, from, to, known_bytes + r.bytes};
  }
  return all;
}

void SequenceKv::SetPageHash(int page_index, uint64_t hash, uint64_t parent) {
  if (page_hashes_.size() <= static_cast<size_t>(page_index)) page_hashes_.resize(page_index + 1, {0, 0});
  page_hashes_[page_index] = {hash, parent};
}

int SequenceKv::full_pages() const {
  int n = -1;
  for (const auto& layer : pages_) {
    for (const HeadPages& h : layer) n = n < 0 ? static_cast<int>(h.full.size()) : std::min(n, static_cast<int>(h.full.size()));
  }
  return std::max(n, 0);
}

std::vector<PageId> SequenceKv::PageIdsAt(int page_index) const {
  std::vector<PageId> ids(static_cast<size_t>(n_layers_) * n_kv_heads_, kNoPage);
  for (int l = 0; l < n_layers_; ++l) {
    for (int h = 0; h < static_cast<int>(pages_[l].size()); ++h) {
      const HeadPages& hp = pages_[l][h];
      if (page_index < static_cast<int>(hp.full.size())) ids[static_cast<size_t>(l) * n_kv_heads_ + h] = hp.full[page_index].id;
    }
  }
  return ids;
}

std::vector<HeadTransform> SequenceKv::Transforms() const {
  std::vector<HeadTransform> out(static_cast<size_t>(n_layers_) * n_kv_heads_);
  for (int l = 0; l < n_layers_; ++l) {
    for (int h = 0; h < static_cast<int>(pages_[l].size()); ++h) out[static_cast<size_t>(l) * n_kv_heads_ + h] = pages_[l][h].xf;
  }
  return out;
}

Status SequenceKv::AttachPrefix(std::span<const PrefixEntry* const> entries) {
  if (entries.empty()) return Status::Ok();
  if (n_tokens_ != 0 || !layout_ || !layout_->all_paged() || store_ == nullptr) {
    return FailedPreconditionError("a cached prefix attaches only to an empty, fully paged sequence");
  }
  const int n = static_cast<int>(entries.size()) * kPage;
  if (n > n_ctx_) return OutOfRangeError("the cached prefix is longer than the context");
  // Transforms and page ids come from disk after a restart: check their shapes before anything is attached.
  const size_t slots = static_cast<size_t>(n_layers_) * n_kv_heads_;
  for (const PrefixEntry* e : entries) {
    if (e->pages.size() != slots) return DataLossError("cached KV prefix: a page entry has the wrong number of heads");
    // Attention reads PageBytes(k) + PageBytes(v) bytes of each page: a recovered page must hold exactly that.
    for (const PageId id : e->pages) {
      const PageInfo* info = store_->Info(id);
      if (info == nullptr) return DataLossError("cached KV prefix: page " + std::to_string(Raw(id)) + " is not stored");
      const auto k_bytes = kernels::PageBytes(info->k, head_dim_);
      const auto v_bytes = kernels::PageBytes(info->v, head_dim_);
      if (!k_bytes.ok() || !v_bytes.ok() || store_->PageLength(id) != *k_bytes + *v_bytes) {
        return DataLossError("cached KV prefix: page " + std::to_string(Raw(id)) + " does not fit this model's head size");
      }
    }
  }
  if (entries[0]->transforms.size() != slots) {
    return DataLossError("cached KV prefix: the head transforms have the wrong number of heads");
  }
  for (const HeadTransform& x : entries[0]->transforms) {
    for (const std::vector<float>* part : {&x.v_scale, &x.k_mean, &x.k_scale, &x.k_rope_mean, &x.k_sink, &x.v_sink}) {
      if (!part->empty() && part->size() != static_cast<size_t>(head_dim_)) {
        return DataLossError("cached KV prefix: a head transform has the wrong length");
      }
    }
    if (!x.k_rope_mean.empty() && (x.k_mean.empty() || x.k_scale.empty())) {
      return DataLossError("cached KV prefix: key offsets without the key transform");
    }
  }
  for (int l = 0; l < n_layers_; ++l) {
    for (int h = 0; h < n_kv_heads_; ++h) {
      HeadPages& hp = pages_[l][h];
      const size_t slot = static_cast<size_t>(l) * n_kv_heads_ + h;
      for (const PrefixEntry* e : entries) {
        const PageId id = e->pages[slot];
        const PageInfo* info = store_->Info(id);  // checked above
        store_->Retain(id);
        hp.full.push_back({id, store_->RamBytes(id), info->k, info->v});
      }
      hp.xf = entries[0]->transforms[slot];
      hp.k_offsets.clear();
      if (!hp.xf.k_rope_mean.empty()) {
        hp.k_offsets.resize(hp.full.size() * head_dim_);
        for (size_t p = 0; p < hp.full.size(); ++p) {
          KeyOffset(l, hp, static_cast<int>(p), hp.k_offsets.data() + p * head_dim_);
        }
      }
    }
    layer_len_[l] = n;
    pass_end_len_[l] = n;
  }
  for (size_t k = 0; k < entries.size(); ++k) SetPageHash(static_cast<int>(k), entries[k]->hash, entries[k]->parent);
  n_tokens_ = n;
  return Status::Ok();
}

void SequenceKv::RecordFault(const Status& status) const {
  std::lock_guard<std::mutex> lock(fault_mu_);
  if (fault_.ok()) fault_ = status;
}

Status SequenceKv::fault() const {
  std::lock_guard<std::mutex> lock(fault_mu_);
  return fault_;
}

namespace {

// Per-channel RMS over tokens [1, kPage) of rows [kPage][d] (token 0, an attention sink, left out), floored at
// 1e-3 of the mean RMS so that a dead channel cannot blow up a division.
std::vector<double> ChannelRms(const float* rows, int d) {
  std::vector<double> rms(d, 0.0);
  for (int t = 1; t < kPage; ++t) {
    for (int i = 0; i < d; ++i) rms[i] += double(rows[size_t(t) * d + i]) * rows[size_t(t) * d + i];
  }
  double mean = 0;
  for (double& r : rms) {
    r = std::sqrt(r / (kPage - 1));
    mean += r;
  }
  mean /= d;
  for (double& r : rms) r = std::max(r, 1e-3 * mean + 1e-20);
  return rms;
}

}  // namespace

void SequenceKv::FixTransform(int layer, const HeadKvFormat& f, HeadPages& h, float* k_rows, float* v_rows) {
  // When a head's first page fills, its rows fix the transform every later row of the head goes through (the f16
  // tail included), so all its pages stay in one domain. Both are exact for attention:
  // - compressed K: keys are stored as (k - mean) / scale and the query is multiplied by scale, so every score
  //   moves by the same -q.mean, which the softmax ignores. The mean removes the keys' large common offset. The
  //   scale: a rotation-based code leaves an error e' spread evenly over the stored domain with E||e'||^2
  //   proportional to ||k'||^2, so a score's error q'.e' has variance proportional to
  //   (sum_i Q_i s_i^2) (sum_i K_i / s_i^2), Q_i and K_i the channel energies of queries and keys; by
  //   Cauchy-Schwarz that is smallest at s_i = (K_i / Q_i)^(1/4) (up to a common factor). With the queries of
  //   the page's tokens (Append's q) that is the scale; without them, (channel RMS / mean RMS)^kKeyScalePower,
  //   the keys-only rule (full key equalization, s_i = K_i^(1/2), measured worse).
  // - compressed V: values are stored divided by a channel scale and Attend multiplies the output by it
  //   (out = sum_t p_t v_t = scale * sum_t p_t (v_t / scale)). The same argument as for keys with every output
  //   channel weighing alike: the error (sum_i s_i^2)(sum_i V_i / s_i^2) is smallest at s_i = V_i^(1/4), the
  //   square root of the channel RMS (measured on WikiText-2 with tq2c values: KLD 0.0118 against 0.0138 for the
  //   RMS itself; docs/notes/low-bit-kv.md).
  constexpr double kKeyScalePower = 0.4;
  const int d = head_dim_;
  HeadTransform& x = h.xf;
  if (f.k != KvFormat::kF16) {
    // The pre-RoPE mean, from the raw rows (token 0 left out, as below); see kv_key_offsets.h.
    x.k_rope_mean = PreRopeMean(layout_->layer(layer).rope, k_rows, kPage, 1, 0, d);
    std::vector<double> sum(d, 0.0);
    for (int t = 1; t < kPage; ++t) {
      for (int i = 0; i < d; ++i) sum[i] += k_rows[size_t(t) * d + i];
    }
    x.k_mean.resize(d);
    for (int i = 0; i < d; ++i) x.k_mean[i] = static_cast<float>(sum[i] / (kPage - 1));
    for (int t = 0; t < kPage; ++t) {
      for (int i = 0; i < d; ++i) k_rows[size_t(t) * d + i] -= x.k_mean[i];
    }
    const std::vector<double> rms = ChannelRms(k_rows, d);
    double mean = 0;
    for (double r : rms) mean += r / d;
    x.k_scale.resize(d);
    if (h.q_rows > 0) {
      // RoPE turns each pair of channels (a, b) with the position, by an angle w per position, which moves energy
      // between a and b: over positions [0, H) a channel's energy tends to the pair's mean m as
      // e -> m + rho (e - m), rho = sinc(2 w H) (clamped to [0, 1]). H = the sequence's context: the slowly
      // turning pairs keep the first page's split, the fast ones take the mean.
      std::vector<double> k_energy(d), q_energy(d);
      for (int i = 0; i < d; ++i) {
        k_energy[i] = rms[i] * rms[i];
        q_energy[i] = h.q_energy[i] / static_cast<double>(h.q_rows);
      }
      const KeyRope& rope = layout_->layer(layer).rope;
      for (int p = 0; p < rope.n_rot / 2; ++p) {
        const int a = rope.style == RopeStyle::kAdjacent ? 2 * p : p;
        const int b = rope.style == RopeStyle::kAdjacent ? 2 * p + 1 : p + rope.n_rot / 2;
        const double w = std::pow(static_cast<double>(rope.base), -2.0 * p / rope.n_rot);
        const double angle = 2.0 * w * n_ctx_;
        const double rho = std::clamp(std::sin(angle) / angle, 0.0, 1.0);
        for (std::vector<double>* e : {&k_energy, &q_energy}) {
          const double m = 0.5 * ((*e)[a] + (*e)[b]);
          (*e)[a] = m + rho * ((*e)[a] - m);
          (*e)[b] = m + rho * ((*e)[b] - m);
        }
      }
      // log s_i = (log K_i - log Q_i) / 4, centred (a common factor changes nothing); Q_i floored at 1e-6 of
      // the mean so that a channel no query reads cannot take an unbounded scale.
      double q_mean = 0;
      for (int i = 0; i < d; ++i) q_mean += q_energy[i] / d;
      std::vector<double> log_s(d);
      double centre = 0;
      for (int i = 0; i < d; ++i) {
        log_s[i] = 0.25 * (std::log(k_energy[i]) - std::log(std::max(q_energy[i], 1e-6 * q_mean + 1e-30)));
        centre += log_s[i] / d;
      }
      for (int i = 0; i < d; ++i) x.k_scale[i] = static_cast<float>(std::exp(log_s[i] - centre));
    } else {
      for (int i = 0; i < d; ++i) x.k_scale[i] = static_cast<float>(std::pow(rms[i] / mean, kKeyScalePower));
    }
    for (int t = 0; t < kPage; ++t) {
      for (int i = 0; i < d; ++i) k_rows[size_t(t) * d + i] /= x.k_scale[i];
    }
  }
  h.q_energy = {};  // used once
  if (f.v != KvFormat::kF16) {
    const std::vector<double> rms = ChannelRms(v_rows, d);
    x.v_scale.resize(d);
    for (int i = 0; i < d; ++i) x.v_scale[i] = static_cast<float>(std::sqrt(rms[i]));
    for (int t = 0; t < kPage; ++t) {
      for (int i = 0; i < d; ++i) v_rows[size_t(t) * d + i] /= x.v_scale[i];
    }
  }
}

StatusOr<std::vector<float>> SinkDifference(const kernels::KvCodec& codec, std::span<const uint8_t> page,
                                            const float* exact, const std::vector<float>* scale) {
  const int d = codec.head_dim();
  thread_local std::vector<float> decoded;
  decoded.resize(static_cast<size_t>(kPage) * d);
  TQ_RETURN_IF_ERROR(codec.DecodePage(page, decoded.data()));
  std::vector<float> diff(d);
  for (int i = 0; i < d; ++i) diff[i] = (exact[i] - decoded[i]) * (scale != nullptr ? (*scale)[i] : 1.0f);
  return diff;
}

void SequenceKv::KeyOffset(int layer, const HeadPages& h, int page_index, float* out) const {
  RotatedMean(layout_->layer(layer).rope, h.xf.k_rope_mean, page_index * kPage, kPage, head_dim_, out);
  for (int i = 0; i < head_dim_; ++i) out[i] -= h.xf.k_mean[i];
}

namespace {
PageRowsObserver& Observer() {
  static PageRowsObserver observer;
  return observer;
}
}  // namespace

void SetPageRowsObserver(PageRowsObserver observer) { Observer() = std::move(observer); }

Status SequenceKv::EncodeFullPage(int layer, int head, HeadPages& h) {
  const HeadKvFormat& f = layout_->head(layer, head);
  // The page's rows in f32, from the f16 tail (in the head's domain once the transform is fixed).
  thread_local std::vector<float> k_page, v_page;
  k_page.resize(static_cast<size_t>(kPage) * head_dim_);
  v_page.resize(k_page.size());
  const kernels::KvCodec& f16 = layout_->codec(KvFormat::kF16);
  TQ_RETURN_IF_ERROR(f16.DecodePage(h.k_tail, k_page.data()));
  TQ_RETURN_IF_ERROR(f16.DecodePage(h.v_tail, v_page.data()));
  float* const k_rows = k_page.data();
  float* const v_rows = v_page.data();
  if (h.full.empty()) FixTransform(layer, f, h, k_rows, v_rows);
  const int page_index = static_cast<int>(h.full.size());
  const int d = head_dim_;
  const bool offsets = !h.xf.k_rope_mean.empty();
  if (f.k != KvFormat::kF16 || f.v != KvFormat::kF16) {
    // The page as the tail held it, for this pass's queries in the page (Attend): in the head's domain, before
    // its key offset; the first page's tail predates the transform, so its copy is raw (kv_cache_pages.h).
    HeadPages::ExactCopy copy;
    copy.page = page_index;
    copy.raw = page_index == 0;
    copy.k = h.k_tail;
    copy.v = h.v_tail;
    h.exact_copies.push_back(std::move(copy));
  }
  if (offsets) {  // the page's keys relative to its offset (kv_cache_pages.h)
    h.k_offsets.resize(static_cast<size_t>(page_index + 1) * d);
    float* off = h.k_offsets.data() + static_cast<size_t>(page_index) * d;
    KeyOffset(layer, h, page_index, off);
    for (int t = 0; t < kPage; ++t) {
      for (int i = 0; i < d; ++i) k_rows[static_cast<size_t>(t) * d + i] -= off[i] / h.xf.k_scale[i];
    }
  }
  // The codec of each side: the layout's, or for an outlier format the head's own, trained on this page when the
  // head has none for the format yet.
  const kernels::KvCodec* codecs[2];
  for (int kv = 0; kv < 2; ++kv) {
    const KvFormat fmt = kv == 0 ? f.k : f.v;
    std::shared_ptr<const kernels::KvCodec>& own = kv == 0 ? h.k_codec : h.v_codec;
    if (kernels::GetFormatInfo(fmt).kind == kernels::FormatKind::kTqOutlier) {
      if (own == nullptr || own->layout().format != fmt) {
        TQ_ASSIGN_OR_RETURN(std::unique_ptr<kernels::KvCodec> trained, kernels::KvCodec::Create(fmt, d));
        TQ_RETURN_IF_ERROR(trained->Train(kv == 0 ? k_rows : v_rows, kPage));
        own = std::move(trained);
      }
      codecs[kv] = own.get();
    } else {
      codecs[kv] = &layout_->codec(fmt);
    }
  }
  // One page in the store: K bytes, then V bytes.
  TQ_ASSIGN_OR_RETURN(size_t k_bytes, kernels::PageBytes(f.k, head_dim_));
  TQ_ASSIGN_OR_RETURN(size_t v_bytes, kernels::PageBytes(f.v, head_dim_));
  std::vector<uint8_t> page(k_bytes + v_bytes);
  for (int kv = 0; kv < 2; ++kv) {
    const KvFormat fmt = kv == 0 ? f.k : f.v;
    std::span<uint8_t> dest(page.data() + (kv == 0 ? 0 : k_bytes), kv == 0 ? k_bytes : v_bytes);
    std::vector<uint8_t>& tail = kv == 0 ? h.k_tail : h.v_tail;
    if (fmt == KvFormat::kF16) {
      std::memcpy(dest.data(), tail.data(), dest.size());  // the tail page is already an f16 page
    } else {
      const float* rows = kv == 0 ? k_rows : v_rows;
      if (PageRowsObserver& observe = Observer()) observe(layer, head, kv, *codecs[kv], rows, kPage);
      TQ_RETURN_IF_ERROR(codecs[kv]->EncodePage(rows, kPage, dest, PageNormRule(kv)));
    }
    tail.clear();
  }
  if (offsets && page_index == 0) {
    // Token 0 (the attention sink of most models) draws much of every head's attention, so its coding error
    // moves every softmax: keep the difference, and attention adds q . k_sink to its score (raw key space).
    TQ_ASSIGN_OR_RETURN(h.xf.k_sink,
                        SinkDifference(*codecs[0], {page.data(), k_bytes}, k_rows, &h.xf.k_scale));
  }
  if (page_index == 0 && f.v != KvFormat::kF16) {
    // Token 0's value likewise; attention adds it with token 0's weight (stored space; Attend scales the output).
    TQ_ASSIGN_OR_RETURN(h.xf.v_sink,
                        SinkDifference(*codecs[1], {page.data() + k_bytes, v_bytes}, v_rows, nullptr));
  }
  h.tail_tokens = 0;
  HeadPages::Full full;
  full.k = f.k;
  full.v = f.v;
  PageInfo info{owner_, layer, head, StreamOf(id_, layer, head), f.k, f.v};
  info.sequence = id_;
  info.page_index = static_cast<uint32_t>(h.full.size());
  if (info.page_index < page_hashes_.size()) {
    info.prefix_hash = page_hashes_[info.page_index].first;
    info.parent_hash = page_hashes_[info.page_index].second;
  }
  if (info.page_index == 0) info.transform = h.xf;
  StatusOr<PageId> id = store_ != nullptr ? store_->Store(f.cls, page, std::move(info))
                                          : StatusOr<PageId>(InternalError("no page store"));
  if (id.ok()) {
    full.id = *id;
    full.ram = store_->RamBytes(*id);
  } else {
    // No tier has room: keep the page here (counted, over budget) rather than lose it; the scheduler preempts.
    // (Store copies, so `page` still holds the bytes.)
    if (overflow_bytes_ == 0) spdlog::warn("KV pages over the tier budgets: {}", id.status().ToString());
    overflow_bytes_ += page.size();
    h.overflow.push_back(std::move(page));
    full.ram = h.overflow.back().data();
  }
  h.full.push_back(full);
  return Status::Ok();
}

Status SequenceKv::Append(int layer, int pos, const float* k, const float* v, const float* q, int q_heads) {
  if (pos >= n_ctx_) {
    return OutOfRangeError("position " + std::to_string(pos) + " is past the context of " + std::to_string(n_ctx_));
  }
  if (pos != layer_len_[layer]) {
    return InvalidArgumentError("KV positions must be appended in order: layer " + std::to_string(layer) + " holds " +
                                std::to_string(layer_len_[layer]) + ", got " + std::to_string(pos));
  }
  const size_t row = static_cast<size_t>(n_kv_heads_) * head_dim_;
  if (!layout_ || layout_->layer(layer).plain) {
    std::vector<float>& data = plain_[layer];  // [pos][2][row]
    if (data.capacity() < (static_cast<size_t>(pos) + 1) * 2 * row) {
      data.reserve((static_cast<size_t>(pos) + kPage) * 2 * row);
    }
    data.insert(data.end(), k, k + row);
    data.insert(data.end(), v, v + row);
    ++layer_len_[layer];
    return Status::Ok();
  }
  const kernels::KvCodec& f16 = layout_->codec(KvFormat::kF16);
  const kernels::CodeLayout& cl = f16.layout();
  const bool by_queries = q != nullptr && q_heads >= n_kv_heads_ && layout_->spec().key_scale == "queries";
  const int q_group = by_queries ? q_heads / n_kv_heads_ : 0;
  for (int h = 0; h < n_kv_heads_; ++h) {
    HeadPages& hp = pages_[layer][h];
    const int t = hp.tail_tokens;
    if (q_group > 0 && hp.full.empty() && layout_->head(layer, h).k != KvFormat::kF16) {
      if (hp.q_energy.empty()) hp.q_energy.assign(head_dim_, 0.0);
      const float* qh = q + static_cast<size_t>(h) * q_group * head_dim_;
      for (int g = 0; g < q_group; ++g, qh += head_dim_) {
        for (int i = 0; i < head_dim_; ++i) hp.q_energy[i] += double{qh[i]} * qh[i];
      }
      hp.q_rows += q_group;
    }
    for (int kv = 0; kv < 2; ++kv) {
      const float* src = (kv == 0 ? k : v) + static_cast<size_t>(h) * head_dim_;
      std::vector<uint8_t>& tail = kv == 0 ? hp.k_tail : hp.v_tail;
      if (tail.empty()) {
        tail.assign(cl.page_bytes, 0);
        kernels::PageHeader header;
        header.format = static_cast<uint8_t>(KvFormat::kF16);
        header.head_dim = static_cast<uint16_t>(head_dim_);
        TQ_RETURN_IF_ERROR(kernels::InitPage(header, tail));
      }
      // Into the head's domain once its first page fixed the transform (FixTransform).
      thread_local std::vector<float> row_buffer;
      row_buffer.resize(head_dim_);
      float* staged = row_buffer.data();
      const HeadTransform& x = hp.xf;
      if (kv == 0 && !x.k_mean.empty()) {
        for (int i = 0; i < head_dim_; ++i) staged[i] = (src[i] - x.k_mean[i]) / x.k_scale[i];
      } else if (kv == 1 && !x.v_scale.empty()) {
        for (int i = 0; i < head_dim_; ++i) staged[i] = src[i] / x.v_scale[i];
      } else {
        std::copy_n(src, head_dim_, staged);
      }
      src = staged;
      // f16 code group: row i holds coordinate i of the group's 16 tokens, 2 bytes each.
      uint8_t* group = tail.data() + cl.codes_offset + static_cast<size_t>(t / kernels::kGroupTokens) * cl.group_bytes;
      const int tg = t % kernels::kGroupTokens;
      for (int i = 0; i < head_dim_; ++i) {
        const uint16_t half = kernels::FloatToHalf(src[i]);
        std::memcpy(group + static_cast<size_t>(i) * 2 * kernels::kGroupTokens + 2 * tg, &half, 2);
      }
      kernels::PageHeader header;
      std::memcpy(&header, tail.data(), sizeof header);
      header.num_tokens = static_cast<uint16_t>(t + 1);
      kernels::SealHeader(header);
      std::memcpy(tail.data(), &header, sizeof header);
    }
    if (++hp.tail_tokens == kPage) TQ_RETURN_IF_ERROR(EncodeFullPage(layer, h, hp));
  }
  ++layer_len_[layer];
  return Status::Ok();
}

// Plain f32 rows: scores, softmax and the weighted sum per query, in scalar code (exact).
void SequenceKv::FinishLayerPass(int layer) {
  if (layer < 0 || layer >= n_layers_) return;
  for (HeadPages& h : pages_[layer]) std::vector<HeadPages::ExactCopy>().swap(h.exact_copies);
  const int window = layout_ ? layout_->layer(layer).window : 0;
  if (window > 0 && !pages_[layer].empty()) {
    // Every later query is at a position >= the previous pass's end, so it sees nothing before
    // pass_end - window + 1: pages that end before that are released.
    const size_t keep_from = static_cast<size_t>(std::max(0, pass_end_len_[layer] - window + 1) / kPage);
    for (HeadPages& h : pages_[layer]) {
      if (h.released_pages < std::min(keep_from, h.full.size())) h.holds.Drop();
      for (size_t p = h.released_pages; p < std::min(keep_from, h.full.size()); ++p) {
        HeadPages::Full& page = h.full[p];
        if (page.id != kNoPage && store_ != nullptr) store_->Release(page.id);
        page = HeadPages::Full{kNoPage, nullptr, page.k, page.v, true};
        h.released_pages = p + 1;
      }
    }
  }
  pass_end_len_[layer] = layer_len_[layer];
}

std::array<uint64_t, 3> SequenceKv::bytes_by_class() const {
  std::array<uint64_t, 3> out{};
  for (const auto& p : plain_) out[0] += p.size() * sizeof(float);
  for (size_t l = 0; l < pages_.size(); ++l) {
    for (size_t h = 0; h < pages_[l].size(); ++h) {
      const HeadPages& hp = pages_[l][h];
      const HeadKvFormat& f = layout_->head(static_cast<int>(l), static_cast<int>(h));
      for (const HeadPages::Full& p : hp.full) {
        if (p.released) continue;
        out[static_cast<int>(f.cls)] += kernels::PageBytes(p.k, head_dim_).value() + kernels::PageBytes(p.v, head_dim_).value();
      }
      out[0] += hp.k_tail.size() + hp.v_tail.size();
    }
  }
  return out;
}

uint64_t SequenceKv::bytes() const {
  uint64_t total = 0;
  for (const uint64_t b : bytes_by_class()) total += b;
  for (const auto& layer : pages_) {
    for (const HeadPages& h : layer) {
      for (const HeadPages::ExactCopy& c : h.exact_copies) total += c.k.size() + c.v.size();
    }
  }
  return total;
}

}  // namespace tq::engine
