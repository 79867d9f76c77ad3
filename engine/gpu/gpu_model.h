// The forward pass of a LLaMA-family model on one GPU, with the semantics of the CPU pass
// (engine/llm/model.cc): RMSNorm, RoPE (the architecture's pairing), optional q/k/v biases, SwiGLU, tied
// output.
//
// Weights: every matrix dequantized on the host (kernels::DecodeRow) to fp16 and uploaded once (plain
// cudaMalloc): q, k, v stacked as one [q_dim + 2 kv_dim][n_embd] matrix, gate and up as one [2 n_ff][n_embd];
// norms and biases in f32.
//
// KV: full pages of kPageTokens tokens, each a page pair (K page, then V page at SlotStride(K page bytes), in
// options.k_format / v_format) of one (sequence, layer, KV head), are pages of the shared page store
// (engine/kv/page_store.h) with the GPU machine's tiers: hot = a device pool (HBM, SlabPageTier over
// DeviceMemory), warm = a pinned host pool, cold = the cold tier on disk (ColdPageTier in options.cold.cold_dir).
// A pair's class picks its home: HOT for most pairs, ACTIVE for those options.warm_heads_fraction selects,
// SPARSE for those options.cold_heads_fraction selects; the store falls back as it does for the CPU. Device pages
// are read by attention where they lie; pinned and cold pages of a layer are staged into device memory a layer
// ahead on the warm tier's copy stream (cold ones read through the cold cache into pinned read sets first). The
// newest, partial page stays f32 on the device: tails [n_layers][n_kv_heads][kPageTokens][head_dim] for K and V;
// when it fills it is encoded (EncodePages) into new page pairs: in place for device pages, through device
// scratch and a copy for pinned ones, through a pinned bounce buffer and the store for cold ones. Everything runs
// on the model's stream; Forward returns after the stream finished (logits on the host). Not thread-safe: one
// Forward or FillSynthetic at a time.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/gpu/device_pool.h"
#include "engine/gpu/model_options.h"
#include "engine/kv/page_store.h"
#include "engine/llm/model.h"
#include "kernels/cuda/kv_codecs.h"
#include "kernels/cuda/kv_kernels.h"
#include "kernels/cuda/runtime.h"
#include "kernels/formats/codec.h"

namespace tq::gpu {

class GpuModel;

// The KV of one sequence. Made by GpuModel::NewSequence; the model must outlive it. Its pages go back to the
// pools on destruction.
class GpuSequence {
 public:
  ~GpuSequence();
  GpuSequence(const GpuSequence&) = delete;
  GpuSequence& operator=(const GpuSequence&) = delete;

  int n_tokens() const { return n_tokens_; }  // positions [0, n_tokens) hold KV
  int full_pages() const { return n_tokens_ / kernels::kPageTokens; }
  // Bytes it holds: page pairs (in any tier) and the f32 tails.
  uint64_t bytes() const;
  engine::SequenceId id() const { return id_; }

 private:
  friend class GpuModel;
  explicit GpuSequence(GpuModel* model) : model_(model), id_(engine::NextSequenceId()) {}

  // One page pair in the store and where the GPU finds it.
  struct Page {
    engine::PageId id{};
    engine::KvTier tier = engine::KvTier::kHot;  // hot: device memory; warm: pinned host memory; cold: disk
    uint8_t* at = nullptr;                       // hot: its device address; warm: its pinned host address
  };

  GpuModel* model_;
  engine::SequenceId id_;  // names its pages' disk streams
  int n_tokens_ = 0;
  // [n_layers * n_kv_heads] page pairs in position order; every list holds full_pages() pages.
  std::vector<std::vector<Page>> pages_;
  DeviceBuffer tail_k_, tail_v_;  // [n_layers][n_kv_heads][kPageTokens][head_dim] f32; rows [0, n_tokens % 128)
};

class GpuModel {
 public:
  // Uploads the weights of `cpu` (which may be closed afterwards) and sets up the KV pools. Unavailable without a
  // GPU; InvalidArgument for an unknown format or a model the kernels do not take (head_dim, GQA group).
  static StatusOr<std::unique_ptr<GpuModel>> Create(const engine::Model& cpu, const GpuModelOptions& options);
  ~GpuModel();
  GpuModel(const GpuModel&) = delete;
  GpuModel& operator=(const GpuModel&) = delete;

  StatusOr<std::unique_ptr<GpuSequence>> NewSequence();

  // Runs `tokens` at positions [first_pos, first_pos + size) of `seq` (first_pos must be seq.n_tokens()),
  // appending their K/V. A prefill is cut into chunks that end at page boundaries and are run as batches. With
  // want_logits, `logits` receives the vocab_size logits of the last token. Errors: a token outside the
  // vocabulary, a position past max_tokens, ResourceExhausted when a pool is full (the sequence then keeps the
  // tokens of the chunks that finished).
  Status Forward(GpuSequence& seq, std::span<const int32_t> tokens, int first_pos, bool want_logits,
                 std::vector<float>* logits);

  // Makes an empty `seq` hold n_tokens of synthetic KV (i.i.d. N(0, 1) keys and values, encoded into pages as
  // the real ones are), without running the model: for decode benchmarks at long contexts.
  Status FillSynthetic(GpuSequence& seq, int n_tokens, uint64_t seed);

  const engine::HParams& hparams() const { return hp_; }
  const GpuModelOptions& options() const { return options_; }
  cudaStream_t stream() const { return stream_.get(); }
  // KV bytes per token held in pages (sum over layers and KV heads of K + V page bytes / kPageTokens).
  double kv_bytes_per_token() const;
  // Of that, the part in device memory (hot heads only; warm and cold pages are staged per layer).
  double hot_kv_bytes_per_token() const;
  // The page store that holds every sequence's page pairs (its hot tier in device memory). The engine shares it
  // (gpu::Backend::store); it may outlive the model, and its pages outlive no sequence.
  const engine::KvPageStore& store() const { return *store_; }
  std::shared_ptr<engine::KvPageStore> shared_store() const { return store_; }
  // (layer, KV head) pairs per class {HOT, ACTIVE (warm heads), SPARSE (cold heads)}.
  std::array<uint64_t, 3> class_pairs() const {
    return {static_cast<uint64_t>(hot_pairs_), static_cast<uint64_t>(warm_pairs_),
            static_cast<uint64_t>(cold_pairs_)};
  }
  int64_t pool_pages() const { return pool_pages_; }  // pages per (layer, KV head) the pools hold
  const WarmTier* warm() const { return warm_.get(); }
  bool is_warm(int layer, int kv_head) const { return warm_heads_[layer * hp_.n_kv_heads + kv_head]; }
  bool is_cold(int layer, int kv_head) const { return cold_heads_[layer * hp_.n_kv_heads + kv_head]; }
  // Milliseconds of the attention calls of the last Forward (sum over layers and chunks); 0 unless
  // options.time_attention.
  float last_attention_ms() const { return last_attention_ms_; }
  size_t weight_bytes() const { return weight_bytes_; }

 private:
  struct Layer {
    DeviceBuffer attn_norm, ffn_norm;  // [n_embd] f32
    DeviceBuffer wqkv;                 // [q_dim + 2 kv_dim][n_embd] fp16
    DeviceBuffer bqkv;                 // [q_dim + 2 kv_dim] f32, or empty without biases
    DeviceBuffer wo;                   // [n_embd][q_dim] fp16
    DeviceBuffer wgu;                  // [2 n_ff][n_embd] fp16 (gate rows, then up rows)
    DeviceBuffer wdown;                // [n_embd][n_ff] fp16
  };

  GpuModel() = default;
  Status UploadWeights(const engine::Model& cpu);
  Status SetUpKv();
  // One chunk: rows within one page (first_pos / 128 == (first_pos + n - 1) / 128), n <= kPageTokens.
  Status ForwardChunk(GpuSequence& seq, std::span<const int32_t> tokens, int first_pos, bool want_logits,
                      std::vector<float>* logits);
  // The ids of layer l's cold pages of seq, in (head, page) order.
  void ColdIds(const GpuSequence& seq, int l, std::vector<engine::PageId>* ids) const;
  // Starts reading layer l's cold pages of seq into the cold cache.
  Status StartColdReads(const GpuSequence& seq, int l);
  // Stages layer l's pinned and cold pages of seq into staging set l % 2, in (head, page) order; cold pages are
  // first copied from the cold cache into pinned read set l % 2 (waiting for their reads).
  Status StageLayer(const GpuSequence& seq, int l);
  size_t PairPages(const GpuSequence& seq, int i) const { return seq.pages_[i].size(); }
  // The class of pair i (HOT, ACTIVE for warm heads, SPARSE for cold heads) and what its page p records.
  engine::PrecisionClass ClassOf(int i) const;
  engine::PageInfo InfoOf(const GpuSequence& seq, int i, int p) const;
  // For each cold pair pair_list[k]: stores the n encoded page pairs at device srcs[k] (pair_stride_ apart)
  // through the pinned bounce buffer and appends them to seq. All or nothing.
  Status WriteColdPages(GpuSequence& seq, std::span<const int> pair_list, std::span<const uint8_t* const> srcs,
                        int n);
  // Encodes the full tails of seq (all layers) into new page pairs and appends them.
  Status FlushTails(GpuSequence& seq);
  // Allocates n pages of pair i in the store (device or pinned slots); on an error none stays allocated.
  Status AllocatePages(const GpuSequence& seq, int i, int n, std::vector<GpuSequence::Page>* out);
  // Encodes n_pages pages of K rows (x_k) and of V rows (x_v), each [n_pages][128][head_dim] f32 with n_tokens
  // valid rows per page, into the page pairs `targets` (device memory).
  Status EncodePairs(const float* x_k, const float* x_v, int n_tokens, std::span<uint8_t* const> targets);
  // Copies the encoded pair at device `src` to its pinned slot on the stream.
  Status CopyPairToHost(const uint8_t* src, uint8_t* host_slot);
  void ReleaseSequence(GpuSequence& seq);
  friend class GpuSequence;

  engine::HParams hp_;
  GpuModelOptions options_;
  int q_dim_ = 0, kv_dim_ = 0, qkv_dim_ = 0, group_ = 0;
  int pages_per_head_ = 0;  // of one sequence (max_tokens): the staging sets' size
  int64_t pool_pages_ = 0;  // per (layer, KV head) in the pools (pool_tokens)
  int hot_pairs_ = 0, warm_pairs_ = 0, cold_pairs_ = 0;
  uint64_t next_serial_ = 1;
  bool neox_ = false;

  // Weights.
  DeviceBuffer token_embd_;     // [vocab][n_embd] fp16
  DeviceBuffer output_norm_;    // [n_embd] f32
  DeviceBuffer output_;         // [vocab][n_embd] fp16; empty when tied to token_embd_
  DeviceBuffer rope_freqs_;     // [n_rot / 2] f32 RoPE angle divisors (Llama 3.1 scaling); empty without
  std::vector<Layer> layers_;
  size_t weight_bytes_ = 0;

  // KV formats and pools.
  std::unique_ptr<kernels::KvCodec> k_codec_, v_codec_;
  DeviceCodecs codecs_;
  int k_index_ = 0, v_index_ = 0;   // into codecs_
  size_t k_page_bytes_ = 0, v_page_bytes_ = 0;
  size_t v_offset_ = 0;             // V page within a pair slot
  size_t pair_bytes_ = 0;           // v_offset_ + v_page_bytes_
  size_t pair_stride_ = 0;          // SlotStride(pair_bytes_)
  std::vector<bool> warm_heads_;    // [n_layers * n_kv_heads]
  std::vector<bool> cold_heads_;    // [n_layers * n_kv_heads]; never warm too
  std::unique_ptr<WarmTier> warm_;     // staging sets and copy stream; null with only hot pairs
  std::vector<StagedPage> staged_[2];  // the pinned and cold pages in each staging set, in (head, page) order
  PinnedBuffer cold_read_[2];          // read sets: one layer's cold pages, pair_stride_ apart
  PinnedBuffer cold_bounce_;           // encoded cold pairs on their way to the store
  std::vector<engine::PageId> cold_ids_;        // StartColdReads' and StageLayer's scratch
  std::vector<engine::PinnedPage> cold_pins_;   // StageLayer's scratch
  // The page store over the device pool, the pinned pool and the cold tier (shared with the engine). Its slab
  // tiers own their memory, and it holds no page of this model's buffers, so it may be destroyed after them.
  std::shared_ptr<engine::KvPageStore> store_;

  // Per-pass buffers (rows <= kPageTokens).
  Stream stream_;
  DeviceBuffer ids_;                  // [2][kPageTokens] int32: tokens, positions
  DeviceBuffer x_, xn_, qkv_, attn_, gu_, h_, logits_;
  DeviceBuffer ptrs_;                 // page pointer arrays for EncodePages
  DeviceBuffer scratch_;              // encode targets of warm pairs / synthetic rows
  std::vector<PagedAttention> attention_;  // one per layer (each keeps its plan buffers in flight)
  std::vector<Event> attn_start_, attn_stop_;
  float last_attention_ms_ = 0.0f;
};

}  // namespace tq::gpu
