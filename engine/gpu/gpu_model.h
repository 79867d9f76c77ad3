// The forward pass of a LLaMA-family model on one GPU, with the semantics of the CPU pass
// (engine/llm/model.cc): RMSNorm, RoPE (the architecture's pairing), optional q/k/v biases, SwiGLU, tied
// output.
//
// Weights: every matrix dequantized on the host (kernels::DecodeRow) to fp16 and uploaded once (plain
// cudaMalloc): q, k, v stacked as one [q_dim + 2 kv_dim][n_embd] matrix, gate and up as one [2 n_ff][n_embd];
// norms and biases in f32. KV of a sequence (GpuSequence): per (layer, KV head) a list of full pages of
// kPageTokens tokens, each a page pair (K page then V page, in options.k_format / v_format) in one slot of
// the device pool (hot) or, for the heads options.warm_heads_fraction selects, of the pinned host pool (warm;
// staged into device memory a layer ahead of attention on the warm tier's copy stream), or, for the heads
// options.cold_heads_fraction selects, on disk (cold: a ColdPages store in options.cold.cold_dir; a layer's
// cold pairs are read into pinned staging buffers while the previous layer computes, then copied to the
// device with the warm ones). The newest, partial page stays f32 on the device: tails
// [n_layers][n_kv_heads][kPageTokens][head_dim] for K and V; when it fills it is encoded (EncodePages) into
// new page pairs. Everything runs on the model's stream; Forward returns after the stream finished (logits on
// the host). Not thread-safe: one Forward or FillSynthetic at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/gpu/cold_pages.h"
#include "engine/gpu/device_pool.h"
#include "engine/gpu/model_options.h"
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
  // Bytes it holds: page-pair slots (hot and warm) and the f32 tails.
  uint64_t bytes() const;

 private:
  friend class GpuModel;
  explicit GpuSequence(GpuModel* model) : model_(model) {}

  GpuModel* model_;
  uint64_t serial_ = 0;  // names its cold streams
  int n_tokens_ = 0;
  // [n_layers * n_kv_heads] page-pair slots in position order (device pool slots for hot heads, pinned host slots
  // for warm heads); every list holds full_pages() slots.
  std::vector<std::vector<uint8_t*>> pages_;
  // [n_layers * n_kv_heads] ids of the cold pairs' pages in the ColdPages store, in position order (empty for
  // hot and warm pairs).
  std::vector<std::vector<uint64_t>> cold_ids_;
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
  const SlabPool& pool() const { return pool_; }
  // Full pages per (layer, KV head) the pools can still take: every pair gets one page when a sequence's tail
  // fills, so this many more pages fit for each of them.
  int64_t free_pages() const;
  int64_t pool_pages() const { return pool_pages_; }  // pages per (layer, KV head) the pools hold
  const WarmTier* warm() const { return warm_.get(); }
  bool is_warm(int layer, int kv_head) const { return warm_heads_[layer * hp_.n_kv_heads + kv_head]; }
  bool is_cold(int layer, int kv_head) const { return cold_heads_[layer * hp_.n_kv_heads + kv_head]; }
  const ColdPages* cold() const { return cold_.get(); }
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
  // Starts reading layer l's cold pages of seq into pinned read set l % 2 (after the copy out of it of layer
  // l - 2 finished).
  Status StartColdReads(const GpuSequence& seq, int l);
  // Stages layer l's warm and cold pages of seq into staging set l % 2, in (head, page) order (waits for the
  // cold reads first).
  Status StageLayer(const GpuSequence& seq, int l);
  // Page pairs pair `i` of seq holds (slots or cold ids).
  size_t PairPages(const GpuSequence& seq, int i) const;
  // For each cold pair pair_list[k] of seq: writes the n encoded page pairs at device srcs[k] (pair_stride_
  // apart) to disk through the pinned bounce buffer and appends their ids. All or nothing.
  Status WriteColdPages(GpuSequence& seq, std::span<const int> pair_list,
                        std::span<const uint8_t* const> srcs, int n);
  // Encodes the full tails of seq (all layers) into new page pairs and appends them.
  Status FlushTails(GpuSequence& seq);
  // Allocates one page-pair slot for (layer, head): a device pool slot (hot) or a pinned host slot (warm).
  StatusOr<uint8_t*> AllocateSlot(int pair_index);
  void FreeSlot(int pair_index, uint8_t* slot);
  // Encodes n_pages pages of K rows (x_k) and of V rows (x_v), each [n_pages][128][head_dim] f32 with n_tokens
  // valid rows per page, into the page pairs `targets` (device memory).
  Status EncodePairs(const float* x_k, const float* x_v, int n_tokens, std::span<uint8_t* const> targets);
  // Copies encoded pairs from device `src` (contiguous, pair_stride_ apart) to pinned slots on the stream.
  Status CopyPairsToHost(const uint8_t* src, std::span<uint8_t* const> host_slots);
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
  SlabPool pool_;
  std::unique_ptr<WarmTier> warm_;
  std::vector<StagedPage> staged_[2];  // the warm and cold pages in each staging set, in (head, page) order
  PinnedBuffer cold_read_[2];          // read sets: one layer's cold pairs' pages, pair_stride_ apart
  PinnedBuffer cold_bounce_;           // encoded cold pairs on their way to disk
  // Null without cold pairs. Declared after its buffers: destroyed first, it finishes reads still in flight
  // into them.
  std::unique_ptr<ColdPages> cold_;

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
