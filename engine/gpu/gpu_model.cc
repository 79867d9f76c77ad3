#include "engine/gpu/gpu_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>

#include "engine/gpu/ops.h"
#include "engine/gpu/slab_page_tier.h"
#include "kernels/cpu/matmul.h"
#include "kernels/weights/half.h"

namespace tq::gpu {
namespace {

using engine::Weight;
constexpr int kPage = kernels::kPageTokens;

// The rows of `parts` (same cols) stacked, decoded to f32 and rounded to fp16, in device memory.
StatusOr<DeviceBuffer> UploadF16(std::initializer_list<const Weight*> parts) {
  const int64_t cols = (*parts.begin())->cols;
  int64_t rows = 0;
  for (const Weight* w : parts) {
    if (w->cols != cols) return InternalError("GpuModel: stacked weights of different widths");
    rows += w->rows;
  }
  std::vector<uint16_t> host(static_cast<size_t>(rows * cols));
  std::vector<float> row(cols);
  int64_t r0 = 0;
  for (const Weight* w : parts) {
    for (int64_t r = 0; r < w->rows; ++r, ++r0) {
      kernels::DecodeRow(w->type, w->data + r * w->row_bytes, cols, row.data());
      uint16_t* out = host.data() + r0 * cols;
      for (int64_t c = 0; c < cols; ++c) out[c] = kernels::FloatToHalf(row[c]);
    }
  }
  TQ_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::Allocate(host.size() * sizeof(uint16_t)));
  TQ_CUDA_RETURN_IF_ERROR(cudaMemcpy(buf.get(), host.data(), host.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
  return buf;
}

// Every element of `parts` (vectors: norms, biases) concatenated, as f32 in device memory.
StatusOr<DeviceBuffer> UploadF32(std::initializer_list<const Weight*> parts) {
  std::vector<float> host;
  for (const Weight* w : parts) {
    const size_t at = host.size();
    host.resize(at + static_cast<size_t>(w->rows * w->cols));
    for (int64_t r = 0; r < w->rows; ++r) {
      kernels::DecodeRow(w->type, w->data + r * w->row_bytes, w->cols, host.data() + at + r * w->cols);
    }
  }
  TQ_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::Allocate(host.size() * sizeof(float)));
  TQ_CUDA_RETURN_IF_ERROR(cudaMemcpy(buf.get(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  return buf;
}

const uint16_t* Halfs(const DeviceBuffer& b) { return b.as<uint16_t>(); }
const float* Floats(const DeviceBuffer& b) { return b.as<float>(); }

// Pair i of n is warm when the running count of fraction * (i + 1) steps up: evenly spread, round(f * n) in all.
bool WarmPair(int64_t i, double fraction) {
  return std::floor((i + 1) * fraction + 1e-9) > std::floor(i * fraction + 1e-9);
}

uint64_t Mix(uint64_t seed, uint64_t a, uint64_t b) {
  uint64_t z = seed ^ (a * 0x9e3779b97f4a7c15ull) ^ (b * 0xc2b2ae3d27d4eb4full);
  z = (z ^ (z >> 33)) * 0xff51afd7ed558ccdull;
  return z ^ (z >> 33);
}

}  // namespace

GpuSequence::~GpuSequence() { model_->ReleaseSequence(*this); }

GpuModel::~GpuModel() = default;

StatusOr<std::unique_ptr<GpuModel>> GpuModel::Create(const engine::Model& cpu, const GpuModelOptions& options) {
  TQ_RETURN_IF_ERROR(CheckGpuModelOptions(options));
  TQ_RETURN_IF_ERROR(ProbeDevice().status());
  std::unique_ptr<GpuModel> m(new GpuModel());
  m->hp_ = cpu.hparams();
  m->options_ = options;
  const engine::HParams& hp = m->hp_;
  if (hp.n_kv_heads <= 0 || hp.n_heads % hp.n_kv_heads != 0) return InvalidArgumentError("GpuModel: bad GQA shape");
  m->group_ = hp.n_heads / hp.n_kv_heads;
  if (m->group_ > kMaxGroup) {
    return InvalidArgumentError("GpuModel: a GQA group of " + std::to_string(m->group_) + " query heads, the "
                                "attention kernels take at most " + std::to_string(kMaxGroup));
  }
  if (hp.arch->embed_scale || hp.arch->qk_norm || hp.arch->post_norms ||
      hp.arch->ffn != engine::FfnActivation::kSilu || (hp.sliding_window > 0 && hp.arch->swa_period > 0) ||
      hp.logit_softcap > 0) {
    return UnimplementedError("GpuModel: architecture '" + std::string(hp.arch->name) +
                              "' is not supported on the GPU yet (llama, mistral, qwen2 and phi3 are)");
  }
  m->q_dim_ = hp.n_heads * hp.head_dim;
  m->kv_dim_ = hp.n_kv_heads * hp.head_dim;
  m->qkv_dim_ = m->q_dim_ + 2 * m->kv_dim_;
  m->neox_ = hp.arch->rope == engine::RopeStyle::kHalves;
  m->pages_per_head_ = (options.max_tokens + kPage - 1) / kPage;
  const int64_t pool_tokens = options.pool_tokens > 0 ? options.pool_tokens : options.max_tokens;
  m->pool_pages_ = (pool_tokens + kPage - 1) / kPage;
  TQ_ASSIGN_OR_RETURN(m->stream_, Stream::Create());
  TQ_RETURN_IF_ERROR(m->UploadWeights(cpu));
  TQ_RETURN_IF_ERROR(m->SetUpKv());

  const engine::HParams& h = m->hp_;
  auto alloc = [](DeviceBuffer& b, size_t floats) -> Status {
    TQ_ASSIGN_OR_RETURN(b, DeviceBuffer::Allocate(floats * sizeof(float)));
    return Status::Ok();
  };
  TQ_RETURN_IF_ERROR(alloc(m->ids_, 2 * kPage));
  TQ_RETURN_IF_ERROR(alloc(m->x_, size_t{kPage} * h.n_embd));
  TQ_RETURN_IF_ERROR(alloc(m->xn_, size_t{kPage} * std::max(h.n_embd, h.n_ff)));
  TQ_RETURN_IF_ERROR(alloc(m->qkv_, size_t{kPage} * m->qkv_dim_));
  TQ_RETURN_IF_ERROR(alloc(m->attn_, size_t{kPage} * m->q_dim_));
  TQ_RETURN_IF_ERROR(alloc(m->gu_, size_t{kPage} * 2 * h.n_ff));
  TQ_RETURN_IF_ERROR(alloc(m->h_, size_t{kPage} * h.n_ff));
  TQ_RETURN_IF_ERROR(alloc(m->logits_, h.vocab_size));
  m->attention_.resize(h.n_layers);
  if (options.time_attention) {
    for (int l = 0; l < h.n_layers; ++l) {
      TQ_ASSIGN_OR_RETURN(Event a, Event::Create(true));
      TQ_ASSIGN_OR_RETURN(Event b, Event::Create(true));
      m->attn_start_.push_back(std::move(a));
      m->attn_stop_.push_back(std::move(b));
    }
  }
  return m;
}

Status GpuModel::UploadWeights(const engine::Model& cpu) {
  const engine::ModelWeights& w = cpu.weights();
  TQ_ASSIGN_OR_RETURN(token_embd_, UploadF16({&w.token_embd}));
  TQ_ASSIGN_OR_RETURN(output_norm_, UploadF32({&w.output_norm}));
  if (w.output.data != w.token_embd.data) {
    TQ_ASSIGN_OR_RETURN(output_, UploadF16({&w.output}));
  }
  if (w.rope_freqs.present()) {
    TQ_ASSIGN_OR_RETURN(rope_freqs_, UploadF32({&w.rope_freqs}));
  }
  weight_bytes_ = token_embd_.bytes() + output_norm_.bytes() + output_.bytes() + rope_freqs_.bytes();
  layers_.resize(hp_.n_layers);
  for (int l = 0; l < hp_.n_layers; ++l) {
    const engine::LayerWeights& s = w.layers[l];
    Layer& d = layers_[l];
    TQ_ASSIGN_OR_RETURN(d.attn_norm, UploadF32({&s.attn_norm}));
    TQ_ASSIGN_OR_RETURN(d.ffn_norm, UploadF32({&s.ffn_norm}));
    TQ_ASSIGN_OR_RETURN(d.wqkv, UploadF16({&s.wq, &s.wk, &s.wv}));
    if (s.bq.present() || s.bk.present() || s.bv.present()) {
      if (!s.bq.present() || !s.bk.present() || !s.bv.present()) {
        return UnimplementedError("GpuModel: only some of the q/k/v biases are present");
      }
      TQ_ASSIGN_OR_RETURN(d.bqkv, UploadF32({&s.bq, &s.bk, &s.bv}));
    }
    TQ_ASSIGN_OR_RETURN(d.wo, UploadF16({&s.wo}));
    TQ_ASSIGN_OR_RETURN(d.wgu, UploadF16({&s.w_gate, &s.w_up}));
    TQ_ASSIGN_OR_RETURN(d.wdown, UploadF16({&s.w_down}));
    weight_bytes_ += d.attn_norm.bytes() + d.ffn_norm.bytes() + d.wqkv.bytes() + d.bqkv.bytes() + d.wo.bytes() +
                     d.wgu.bytes() + d.wdown.bytes();
  }
  return Status::Ok();
}

Status GpuModel::SetUpKv() {
  TQ_ASSIGN_OR_RETURN(kernels::KvFormat kf, kernels::FormatFromName(options_.k_format));
  TQ_ASSIGN_OR_RETURN(kernels::KvFormat vf, kernels::FormatFromName(options_.v_format));
  TQ_ASSIGN_OR_RETURN(k_codec_, kernels::KvCodec::Create(kf, hp_.head_dim));
  TQ_ASSIGN_OR_RETURN(v_codec_, kernels::KvCodec::Create(vf, hp_.head_dim));
  TQ_ASSIGN_OR_RETURN(k_index_, codecs_.Add(*k_codec_));
  TQ_ASSIGN_OR_RETURN(v_index_, codecs_.Add(*v_codec_));
  k_page_bytes_ = k_codec_->layout().page_bytes;
  v_page_bytes_ = v_codec_->layout().page_bytes;
  v_offset_ = SlotStride(k_page_bytes_);
  pair_bytes_ = v_offset_ + v_page_bytes_;
  pair_stride_ = SlotStride(pair_bytes_);

  const int pairs = hp_.n_layers * hp_.n_kv_heads;
  warm_heads_.assign(pairs, false);
  cold_heads_.assign(pairs, false);
  int warm_pairs = 0, cold_pairs = 0, cold_per_layer = 0;
  for (int l = 0; l < hp_.n_layers; ++l) {
    int cold_in_layer = 0;
    for (int h = 0; h < hp_.n_kv_heads; ++h) {
      const int i = l * hp_.n_kv_heads + h;
      cold_heads_[i] = WarmPair(i, options_.cold_heads_fraction);
      warm_heads_[i] = !cold_heads_[i] && WarmPair(i, options_.warm_heads_fraction);
      warm_pairs += warm_heads_[i] ? 1 : 0;
      cold_in_layer += cold_heads_[i] ? 1 : 0;
    }
    cold_pairs += cold_in_layer;
    cold_per_layer = std::max(cold_per_layer, cold_in_layer);
  }
  const int hot_pairs = pairs - warm_pairs - cold_pairs;
  hot_pairs_ = hot_pairs;
  warm_pairs_ = warm_pairs;
  cold_pairs_ = cold_pairs;
  const uint64_t per_pair = static_cast<uint64_t>(pool_pages_) * pair_stride_;
  // Staging carries a layer's pinned and cold pages to the device; with fallbacks any head's pages may be pinned.
  const size_t read_set = pair_stride_ * static_cast<size_t>(cold_per_layer) * pages_per_head_;
  if (warm_pairs + cold_pairs > 0) {
    const size_t staging = pair_stride_ * static_cast<size_t>(hp_.n_kv_heads) * pages_per_head_;
    TQ_ASSIGN_OR_RETURN(WarmTier tier, WarmTier::Create(staging));
    warm_ = std::make_unique<WarmTier>(std::move(tier));
  }
  if (cold_pairs > 0) {
    for (PinnedBuffer& b : cold_read_) TQ_RETURN_IF_ERROR(b.Reserve(read_set));
  }

  engine::KvStoreOptions so;
  so.hot_bytes = hot_pairs * per_pair;
  so.warm_bytes = warm_pairs * per_pair;
  so.warm_lock = false;  // pinned memory is locked already
  if (cold_pairs > 0) {
    so.cold_dir = options_.cold.cold_dir;
    so.cold_bytes = options_.cold.capacity_bytes;
    so.direct_io = options_.cold.direct_io;
    so.io_backend = options_.cold.io.backend;
    so.io_depth = options_.cold.io.queue_depth;
    // Two layers' cold pages (the one staged, the one read ahead) and room for the pages being written.
    so.cold_cache_bytes = 3 * std::max<uint64_t>(read_set, pair_stride_);
  } else {
    so.cold_dir.clear();
  }
  so.head_dim = static_cast<uint32_t>(hp_.head_dim);
  const uint32_t page = static_cast<uint32_t>(pair_bytes_);
  engine::KvPageStore::TierMaker gpu_tiers = [](engine::KvTier kind, uint64_t budget, uint32_t slot_bytes,
                                                bool) -> StatusOr<std::unique_ptr<engine::PageTier>> {
    std::shared_ptr<SlabMemory> memory = kind == engine::KvTier::kHot ? DeviceMemory() : PinnedHostMemory();
    TQ_ASSIGN_OR_RETURN(std::unique_ptr<SlabPageTier> t, SlabPageTier::Open(kind, memory, budget, slot_bytes));
    return std::unique_ptr<engine::PageTier>(std::move(t));
  };
  TQ_ASSIGN_OR_RETURN(store_, engine::KvPageStore::Open(so, {hot_pairs > 0 ? page : 0u, warm_pairs > 0 ? page : 0u,
                                                             cold_pairs > 0 ? page : 0u},
                                                         gpu_tiers));
  // Pages of an earlier process belong to sequences that no longer exist (no GPU page is named for reuse yet).
  for (const engine::RecoveredPage& r : store_->TakeRecovered()) store_->Release(r.id);
  return Status::Ok();
}

double GpuModel::kv_bytes_per_token() const {
  return static_cast<double>(hp_.n_layers) * hp_.n_kv_heads * static_cast<double>(k_page_bytes_ + v_page_bytes_) /
         kPage;
}

double GpuModel::hot_kv_bytes_per_token() const {
  int64_t hot = 0;
  for (size_t i = 0; i < warm_heads_.size(); ++i) hot += !warm_heads_[i] && !cold_heads_[i];
  return static_cast<double>(hot) * static_cast<double>(k_page_bytes_ + v_page_bytes_) / kPage;
}

uint64_t GpuSequence::bytes() const {
  uint64_t pages = 0;
  for (const auto& list : pages_) pages += list.size();
  return pages * model_->pair_bytes_ + tail_k_.bytes() + tail_v_.bytes();
}

StatusOr<std::unique_ptr<GpuSequence>> GpuModel::NewSequence() {
  std::unique_ptr<GpuSequence> seq(new GpuSequence(this));
  seq->pages_.resize(warm_heads_.size());
  const size_t tail_bytes = warm_heads_.size() * kPage * hp_.head_dim * sizeof(float);
  TQ_ASSIGN_OR_RETURN(seq->tail_k_, DeviceBuffer::Allocate(tail_bytes));
  TQ_ASSIGN_OR_RETURN(seq->tail_v_, DeviceBuffer::Allocate(tail_bytes));
  return seq;
}

void GpuModel::ReleaseSequence(GpuSequence& seq) {
  // Kernels of the last pass may still read the pages: let them finish before the slots are reused.
  (void)cudaStreamSynchronize(stream_.get());
  for (auto& list : seq.pages_) {
    for (const GpuSequence::Page& p : list) store_->Release(p.id);
    list.clear();
  }
  seq.n_tokens_ = 0;
}

engine::PrecisionClass GpuModel::ClassOf(int i) const {
  if (cold_heads_[i]) return engine::PrecisionClass::kSparse;
  return warm_heads_[i] ? engine::PrecisionClass::kActive : engine::PrecisionClass::kHot;
}

engine::PageInfo GpuModel::InfoOf(const GpuSequence& seq, int i, int p) const {
  engine::PageInfo info;
  info.layer = i / hp_.n_kv_heads;
  info.kv_head = i % hp_.n_kv_heads;
  info.sequence = seq.id_;
  info.stream = engine::StreamOf(seq.id_, info.layer, info.kv_head);
  info.k = k_codec_->format();
  info.v = v_codec_->format();
  info.page_index = p;
  return info;
}

Status GpuModel::AllocatePages(const GpuSequence& seq, int i, int n, std::vector<GpuSequence::Page>* out) {
  out->clear();
  const int first = static_cast<int>(seq.pages_[i].size());
  for (int p = 0; p < n; ++p) {
    StatusOr<engine::KvPageStore::Allocated> a =
        store_->Allocate(ClassOf(i), static_cast<uint32_t>(pair_bytes_), InfoOf(seq, i, first + p));
    if (!a.ok()) {
      for (const GpuSequence::Page& q : *out) store_->Release(q.id);
      out->clear();
      return a.status();
    }
    out->push_back({a->id, a->tier, a->at});
  }
  return Status::Ok();
}

Status GpuModel::EncodePairs(const float* x_k, const float* x_v, int n_tokens, std::span<uint8_t* const> targets) {
  const int n = static_cast<int>(targets.size());
  if (n == 0) return Status::Ok();
  // [0, n): K pages, [n, 2n): V pages. Uploaded on the stream, so the array may be rewritten by the next call.
  std::vector<uint8_t*> ptrs(2 * static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    ptrs[i] = targets[i];
    ptrs[n + i] = targets[i] + v_offset_;
  }
  TQ_RETURN_IF_ERROR(ptrs_.Reserve(ptrs.size() * sizeof(uint8_t*)));
  TQ_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ptrs_.get(), ptrs.data(), ptrs.size() * sizeof(uint8_t*),
                                          cudaMemcpyHostToDevice, stream_.get()));
  uint8_t* const* dev = ptrs_.as<uint8_t*>();
  const int64_t stride = int64_t{kPage} * hp_.head_dim;
  TQ_RETURN_IF_ERROR(EncodePages(codecs_, k_index_, x_k, stride, n_tokens, dev, n, nullptr, stream_.get()));
  TQ_RETURN_IF_ERROR(EncodePages(codecs_, v_index_, x_v, stride, n_tokens, dev + n, n, nullptr, stream_.get(),
                                 kernels::NormRule::kInnerProduct));
  return Status::Ok();
}

Status GpuModel::CopyPairToHost(const uint8_t* src, uint8_t* host_slot) {
  TQ_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_slot, src, pair_stride_, cudaMemcpyDeviceToHost, stream_.get()));
  return Status::Ok();
}

Status GpuModel::FlushTails(GpuSequence& seq) {
  const int pairs = static_cast<int>(warm_heads_.size());
  std::vector<GpuSequence::Page> fresh(pairs);  // id kNoPage for cold pairs
  std::vector<GpuSequence::Page> one;
  auto release = [&] {
    for (const GpuSequence::Page& p : fresh) {
      if (p.id != engine::kNoPage) store_->Release(p.id);
    }
  };
  for (int i = 0; i < pairs; ++i) {
    if (cold_heads_[i]) continue;
    if (Status s = AllocatePages(seq, i, 1, &one); !s.ok()) {
      release();
      return s;
    }
    fresh[i] = one[0];
  }
  // Device pages are encoded in place; pinned and cold pairs into device scratch, then copied to their pinned
  // slots (pinned) or stored through the bounce buffer (cold).
  if (Status s = scratch_.Reserve(pair_stride_ * pairs); !s.ok()) {
    release();
    return s;
  }
  std::vector<uint8_t*> targets(pairs);
  for (int i = 0; i < pairs; ++i) {
    const bool in_place = !cold_heads_[i] && fresh[i].tier == engine::KvTier::kHot;
    targets[i] = in_place ? fresh[i].at : scratch_.as<uint8_t>() + static_cast<size_t>(i) * pair_stride_;
  }
  Status s = EncodePairs(seq.tail_k_.as<float>(), seq.tail_v_.as<float>(), kPage, targets);
  for (int i = 0; s.ok() && i < pairs; ++i) {
    if (!cold_heads_[i] && fresh[i].tier != engine::KvTier::kHot) s = CopyPairToHost(targets[i], fresh[i].at);
  }
  std::vector<int> cold_list;
  std::vector<const uint8_t*> cold_src;
  for (int i = 0; i < pairs; ++i) {
    if (!cold_heads_[i]) continue;
    cold_list.push_back(i);
    cold_src.push_back(targets[i]);
  }
  if (s.ok() && !cold_list.empty()) s = WriteColdPages(seq, cold_list, cold_src, 1);  // last: all or nothing
  if (!s.ok()) {
    TQ_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
    release();
    return s;
  }
  for (int i = 0; i < pairs; ++i) {
    if (!cold_heads_[i]) seq.pages_[i].push_back(fresh[i]);
  }
  return Status::Ok();
}

Status GpuModel::WriteColdPages(GpuSequence& seq, std::span<const int> pair_list,
                                std::span<const uint8_t* const> srcs, int n) {
  const size_t per_pair = static_cast<size_t>(n) * pair_stride_;
  TQ_RETURN_IF_ERROR(cold_bounce_.Reserve(per_pair * pair_list.size()));
  uint8_t* bounce = cold_bounce_.as<uint8_t>();
  for (size_t k = 0; k < pair_list.size(); ++k) {
    TQ_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(bounce + k * per_pair, srcs[k], per_pair, cudaMemcpyDeviceToHost, stream_.get()));
  }
  TQ_RETURN_IF_ERROR(stream_.Synchronize());
  // The store copies each page (its cold tier writes it behind its record; a full disk falls back to the pools).
  std::vector<std::vector<GpuSequence::Page>> stored(pair_list.size());
  for (size_t k = 0; k < pair_list.size(); ++k) {
    const int i = pair_list[k];
    const int first = static_cast<int>(seq.pages_[i].size());
    for (int p = 0; p < n; ++p) {
      const uint8_t* bytes = bounce + k * per_pair + static_cast<size_t>(p) * pair_stride_;
      StatusOr<engine::PageId> id = store_->Store(engine::PrecisionClass::kSparse,
                                                  std::span<const uint8_t>(bytes, pair_bytes_),
                                                  InfoOf(seq, i, first + p));
      if (!id.ok()) {
        for (const auto& list : stored) {
          for (const GpuSequence::Page& q : list) store_->Release(q.id);
        }
        return id.status();
      }
      const engine::KvTier tier = store_->TierOf(*id).value_or(engine::KvTier::kCold);
      stored[k].push_back({*id, tier, const_cast<uint8_t*>(store_->Address(*id))});
    }
  }
  for (size_t k = 0; k < pair_list.size(); ++k) {
    std::vector<GpuSequence::Page>& list = seq.pages_[pair_list[k]];
    list.insert(list.end(), stored[k].begin(), stored[k].end());
  }
  return Status::Ok();
}

void GpuModel::ColdIds(const GpuSequence& seq, int l, std::vector<engine::PageId>* ids) const {
  ids->clear();
  for (int h = 0; h < hp_.n_kv_heads; ++h) {
    for (const GpuSequence::Page& p : seq.pages_[l * hp_.n_kv_heads + h]) {
      if (p.tier == engine::KvTier::kCold) ids->push_back(p.id);
    }
  }
}

Status GpuModel::StartColdReads(const GpuSequence& seq, int l) {
  if (!store_->has_cold_tier()) return Status::Ok();
  ColdIds(seq, l, &cold_ids_);
  if (!cold_ids_.empty()) store_->Prefetch(cold_ids_);
  return Status::Ok();
}

Status GpuModel::StageLayer(const GpuSequence& seq, int l) {
  const int set = l % 2;
  std::vector<engine::PageId>& ids = cold_ids_;
  ColdIds(seq, l, &ids);
  uint8_t* cold_at = nullptr;
  if (!ids.empty()) {
    if (ids.size() * pair_stride_ > cold_read_[set].bytes()) {
      return ResourceExhaustedError("GpuModel: " + std::to_string(ids.size()) + " cold pages exceed the read set");
    }
    // The copy out of this read set (layer l - 2's pages) must be done before it is overwritten.
    TQ_RETURN_IF_ERROR(warm_->SyncStaged(set));
    cold_pins_.assign(ids.size(), engine::PinnedPage{});
    Status pinned = store_->PinMany(ids, cold_pins_);
    cold_at = cold_read_[set].as<uint8_t>();
    for (size_t k = 0; pinned.ok() && k < ids.size(); ++k) {
      std::memcpy(cold_at + k * pair_stride_, cold_pins_[k].data, pair_bytes_);
    }
    cold_pins_.clear();  // the cache may evict them again
    TQ_RETURN_IF_ERROR(pinned);
  }
  std::vector<StagedPage>& staged = staged_[set];
  staged.clear();
  for (int h = 0; h < hp_.n_kv_heads; ++h) {
    for (const GpuSequence::Page& p : seq.pages_[l * hp_.n_kv_heads + h]) {
      if (p.tier == engine::KvTier::kWarm) {
        staged.push_back(StagedPage{p.at, nullptr});
      } else if (p.tier == engine::KvTier::kCold) {
        staged.push_back(StagedPage{cold_at, nullptr});  // read in the same (head, page) order
        cold_at += pair_stride_;
      }
    }
  }
  if (staged.empty()) return Status::Ok();
  return warm_->StageAsync(set, staged, pair_stride_);
}

Status GpuModel::Forward(GpuSequence& seq, std::span<const int32_t> tokens, int first_pos, bool want_logits,
                         std::vector<float>* logits) {
  if (seq.model_ != this) return InvalidArgumentError("GpuModel: the sequence belongs to another model");
  if (first_pos != seq.n_tokens()) {
    return InvalidArgumentError("GpuModel: position " + std::to_string(first_pos) + " does not continue the "
                                "sequence (next is " + std::to_string(seq.n_tokens()) + ")");
  }
  if (tokens.empty()) return InvalidArgumentError("GpuModel: no tokens");
  if (first_pos + static_cast<int64_t>(tokens.size()) > options_.max_tokens) {
    return OutOfRangeError("GpuModel: " + std::to_string(first_pos + tokens.size()) + " tokens exceed max_tokens " +
                           std::to_string(options_.max_tokens));
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= hp_.vocab_size) {
      return InvalidArgumentError("token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                                  std::to_string(hp_.vocab_size) + ")");
    }
  }
  if (want_logits && logits == nullptr) return InvalidArgumentError("GpuModel: want_logits without a vector");
  last_attention_ms_ = 0.0f;
  size_t done = 0;
  while (done < tokens.size()) {
    const int pos = first_pos + static_cast<int>(done);
    const size_t n = std::min(tokens.size() - done, static_cast<size_t>(kPage - pos % kPage));
    const bool last = done + n == tokens.size();
    TQ_RETURN_IF_ERROR(ForwardChunk(seq, tokens.subspan(done, n), pos, want_logits && last, logits));
    done += n;
  }
  return Status::Ok();
}

Status GpuModel::ForwardChunk(GpuSequence& seq, std::span<const int32_t> tokens, int first_pos, bool want_logits,
                              std::vector<float>* logits) {
  const engine::HParams& hp = hp_;
  const int n = static_cast<int>(tokens.size());
  const int E = hp.n_embd, D = hp.head_dim, H = hp.n_kv_heads;
  const int slot0 = first_pos % kPage;
  cudaStream_t st = stream_.get();

  std::vector<int32_t> ids(2 * static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    ids[r] = tokens[r];
    ids[n + r] = first_pos + r;
  }
  TQ_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ids_.get(), ids.data(), ids.size() * sizeof(int32_t),
                                          cudaMemcpyHostToDevice, st));
  const int32_t* d_tokens = ids_.as<int32_t>();
  const int32_t* d_pos = d_tokens + n;
  float* x = x_.as<float>();
  float* xn = xn_.as<float>();
  float* qkv = qkv_.as<float>();
  float* attn = attn_.as<float>();
  TQ_RETURN_IF_ERROR(EmbedRows(Halfs(token_embd_), E, d_tokens, n, x, st));

  const bool cold = store_->has_cold_tier();
  if (warm_) {
    TQ_RETURN_IF_ERROR(warm_->BeginPass(st));
    TQ_RETURN_IF_ERROR(StartColdReads(seq, 0));
    TQ_RETURN_IF_ERROR(StageLayer(seq, 0));
  }
  std::vector<GpuPage> pages;
  std::vector<GpuQuery> queries;
  const int64_t head_stride = int64_t{kPage} * D;  // floats between two heads' tails
  for (int l = 0; l < hp.n_layers; ++l) {
    const Layer& L = layers_[l];
    // The copy of layer l + 1's warm pages overlaps this layer's compute. With cold pairs, their reads go
    // first and the copy is queued once they landed, after this layer's work is queued.
    const bool next = warm_ && l + 1 < hp.n_layers;
    if (next) TQ_RETURN_IF_ERROR(StartColdReads(seq, l + 1));
    if (next && !cold) TQ_RETURN_IF_ERROR(StageLayer(seq, l + 1));
    TQ_RETURN_IF_ERROR(RmsNorm(x, Floats(L.attn_norm), n, E, hp.rms_eps, xn, st));
    TQ_RETURN_IF_ERROR(MatMulF16(Halfs(L.wqkv), qkv_dim_, E, xn, E, n, qkv, qkv_dim_, false, st));
    if (L.bqkv.get() != nullptr) TQ_RETURN_IF_ERROR(AddBias(qkv, qkv_dim_, Floats(L.bqkv), qkv_dim_, n, st));
    // q heads then k heads are contiguous in a row: one RoPE call for both.
    TQ_RETURN_IF_ERROR(Rope(qkv, qkv_dim_, n, hp.n_heads + H, D, hp.n_rot, d_pos, hp.rope_base,
                         rope_freqs_.get() != nullptr ? Floats(rope_freqs_) : nullptr, neox_, st));
    float* tail_k = seq.tail_k_.as<float>() + int64_t{l} * H * head_stride;
    float* tail_v = seq.tail_v_.as<float>() + int64_t{l} * H * head_stride;
    TQ_RETURN_IF_ERROR(ScatterKv(qkv + q_dim_, qkv + q_dim_ + kv_dim_, qkv_dim_, n, H, D, tail_k, tail_v,
                                 head_stride, slot0, st));

    // Page table: each head's pages in order; device pages where they lie, the others' staged copies.
    pages.clear();
    std::vector<int32_t> first(H);
    size_t staged_at = 0;
    for (int h = 0; h < H; ++h) {
      const int i = l * H + h;
      first[h] = static_cast<int32_t>(pages.size());
      for (const GpuSequence::Page& p : seq.pages_[i]) {
        const uint8_t* base = p.tier == engine::KvTier::kHot ? p.at : staged_[l % 2][staged_at++].device;
        pages.push_back(GpuPage{base, base + v_offset_, k_index_, v_index_, kPage});
      }
    }
    queries.clear();
    const int span = group_ * D;
    for (int r = 0; r < n; ++r) {
      for (int h = 0; h < H; ++h) {
        GpuQuery q;
        q.q = qkv + int64_t{r} * qkv_dim_ + h * span;
        q.out = attn + int64_t{r} * q_dim_ + h * span;
        q.first_page = first[h];
        q.num_pages = static_cast<int32_t>(PairPages(seq, l * H + h));
        q.tail_k = tail_k + h * head_stride;
        q.tail_v = tail_v + h * head_stride;
        q.tail_tokens = slot0 + n;
        q.limit = first_pos + r + 1;
        queries.push_back(q);
      }
    }
    if (warm_) TQ_RETURN_IF_ERROR(warm_->WaitStaged(l % 2, st));
    if (options_.time_attention) TQ_CUDA_RETURN_IF_ERROR(cudaEventRecord(attn_start_[l].get(), st));
    TQ_RETURN_IF_ERROR(attention_[l].Run(codecs_, pages, queries, D, group_, 0.0f, st));
    if (options_.time_attention) TQ_CUDA_RETURN_IF_ERROR(cudaEventRecord(attn_stop_[l].get(), st));
    if (warm_) TQ_RETURN_IF_ERROR(warm_->Release(l % 2, st));

    TQ_RETURN_IF_ERROR(MatMulF16(Halfs(L.wo), E, q_dim_, attn, q_dim_, n, x, E, true, st));  // x += wo attn
    TQ_RETURN_IF_ERROR(RmsNorm(x, Floats(L.ffn_norm), n, E, hp.rms_eps, xn, st));
    TQ_RETURN_IF_ERROR(MatMulF16(Halfs(L.wgu), 2 * hp.n_ff, E, xn, E, n, gu_.as<float>(), 2 * hp.n_ff, false, st));
    TQ_RETURN_IF_ERROR(SwiGlu(gu_.as<float>(), hp.n_ff, n, h_.as<float>(), st));
    TQ_RETURN_IF_ERROR(MatMulF16(Halfs(L.wdown), E, hp.n_ff, h_.as<float>(), hp.n_ff, n, x, E, true, st));
    if (next && cold) TQ_RETURN_IF_ERROR(StageLayer(seq, l + 1));  // waits for the reads while the GPU works
  }
  if (want_logits) {
    const float* last = x + int64_t{n - 1} * E;
    TQ_RETURN_IF_ERROR(RmsNorm(last, Floats(output_norm_), 1, E, hp.rms_eps, xn, st));
    const DeviceBuffer& out = output_.get() != nullptr ? output_ : token_embd_;
    TQ_RETURN_IF_ERROR(
        MatMulF16(Halfs(out), hp.vocab_size, E, xn, E, 1, logits_.as<float>(), hp.vocab_size, false, st));
    logits->resize(hp.vocab_size);
    TQ_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits->data(), logits_.get(), sizeof(float) * hp.vocab_size,
                                            cudaMemcpyDeviceToHost, st));
  }
  if ((slot0 + n) % kPage == 0) TQ_RETURN_IF_ERROR(FlushTails(seq));
  TQ_RETURN_IF_ERROR(stream_.Synchronize());
  seq.n_tokens_ = first_pos + n;
  if (options_.time_attention) {
    for (int l = 0; l < hp.n_layers; ++l) {
      TQ_ASSIGN_OR_RETURN(float ms, ElapsedMs(attn_start_[l], attn_stop_[l]));
      last_attention_ms_ += ms;
    }
  }
  return Status::Ok();
}

Status GpuModel::FillSynthetic(GpuSequence& seq, int n_tokens, uint64_t seed) {
  if (seq.model_ != this) return InvalidArgumentError("GpuModel: the sequence belongs to another model");
  if (seq.n_tokens() != 0) return FailedPreconditionError("GpuModel: FillSynthetic needs an empty sequence");
  ReleaseSequence(seq);  // drops the pages a failed earlier fill may have left
  if (n_tokens < 0 || n_tokens > options_.max_tokens) {
    return OutOfRangeError("GpuModel: " + std::to_string(n_tokens) + " tokens, max_tokens is " +
                           std::to_string(options_.max_tokens));
  }
  const int D = hp_.head_dim;
  const int n_pages = n_tokens / kPage;
  const int pairs = static_cast<int>(warm_heads_.size());
  const size_t page_floats = size_t{kPage} * D;
  cudaStream_t st = stream_.get();
  DeviceBuffer rows_k, rows_v;
  if (n_pages > 0) {
    TQ_ASSIGN_OR_RETURN(rows_k, DeviceBuffer::Allocate(page_floats * n_pages * sizeof(float)));
    TQ_ASSIGN_OR_RETURN(rows_v, DeviceBuffer::Allocate(page_floats * n_pages * sizeof(float)));
    TQ_RETURN_IF_ERROR(scratch_.Reserve(pair_stride_ * n_pages));
  }
  std::vector<uint8_t*> targets(n_pages);
  std::vector<GpuSequence::Page> fresh;
  for (int i = 0; i < pairs && n_pages > 0; ++i) {
    const bool cold = cold_heads_[i];
    if (!cold) {
      if (Status s = AllocatePages(seq, i, n_pages, &fresh); !s.ok()) {
        ReleaseSequence(seq);
        return s;
      }
      seq.pages_[i] = fresh;  // owned by the sequence from here (freed with it on an error below)
    }
    for (int p = 0; p < n_pages; ++p) {
      const bool in_place = !cold && fresh[p].tier == engine::KvTier::kHot;
      targets[p] = in_place ? fresh[p].at : scratch_.as<uint8_t>() + static_cast<size_t>(p) * pair_stride_;
    }
    TQ_RETURN_IF_ERROR(RandomNormal(rows_k.as<float>(), page_floats * n_pages, Mix(seed, i, 0), 1.0f, st));
    TQ_RETURN_IF_ERROR(RandomNormal(rows_v.as<float>(), page_floats * n_pages, Mix(seed, i, 1), 1.0f, st));
    TQ_RETURN_IF_ERROR(EncodePairs(rows_k.as<float>(), rows_v.as<float>(), kPage, targets));
    for (int p = 0; !cold && p < n_pages; ++p) {
      if (fresh[p].tier != engine::KvTier::kHot) TQ_RETURN_IF_ERROR(CopyPairToHost(targets[p], fresh[p].at));
    }
    if (cold) {
      const int list[1] = {i};
      const uint8_t* src[1] = {scratch_.as<uint8_t>()};
      if (Status s = WriteColdPages(seq, list, src, n_pages); !s.ok()) {
        ReleaseSequence(seq);
        return s;
      }
    }
  }
  const int64_t tail_floats = int64_t{pairs} * kPage * D;
  TQ_RETURN_IF_ERROR(RandomNormal(seq.tail_k_.as<float>(), tail_floats, Mix(seed, pairs, 2), 1.0f, st));
  TQ_RETURN_IF_ERROR(RandomNormal(seq.tail_v_.as<float>(), tail_floats, Mix(seed, pairs, 3), 1.0f, st));
  TQ_RETURN_IF_ERROR(stream_.Synchronize());
  seq.n_tokens_ = n_tokens;
  return Status::Ok();
}

}  // namespace tq::gpu
