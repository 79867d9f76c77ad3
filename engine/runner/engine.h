// The engine: one loop that schedules every step (continuous batching with chunked prefill under a token budget),
// runs the model forward on a thread pool, samples, and streams tokens to each request's sink.
// The server's only view of the engine: front ends include this header and request.h.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/gpu/backend.h"
#include "engine/llm/model.h"
#include "engine/runner/request.h"
#include "engine/tokenizer/tokenizer.h"

namespace tq::engine {

struct EngineOptions {
  std::string model_path;
  int threads = 0;             // 0 = all cores
  int ctx_size = 0;            // per sequence; 0 = the model's trained context
  int max_batch_tokens = 512;  // tokens per step: decodes first, then prefill chunks
  int max_running = 32;        // sequences decoding at once
  int max_waiting = 1024;      // queued requests beyond which Submit() says resource_exhausted
  KvSpec kv;                   // KV formats per layer
  KvStoreOptions kv_store;     // tier budgets, cold directory, I/O backend
  uint64_t prefix_cache_bytes = uint64_t{1} << 30;  // pages kept for reuse by later requests; 0 = off
  double prefix_pin_seconds = 0;                    // a cached prefix used within this long is not evicted
  bool kv_adapt = false;                            // online adaptation of classes (engine/kv/adaptation.h)
  AdaptationOptions adapt;
  // Where the forward pass runs: "cpu", or "cuda" (engine/gpu/backend.h: weights and KV in GPU memory,
  // kv_store.hot_bytes the device pool's budget, gpu_warm_fraction of the heads' pages in pinned host memory,
  // gpu_cold_fraction on disk in kv_store.cold_dir; one K and one V format everywhere; no prefix cache or
  // online adaptation there yet).
  std::string device = "cpu";
  double gpu_warm_fraction = 0;
  double gpu_cold_fraction = 0;
};

// Where one (layer, KV head)'s full pages live now: its precision class, that class's home tier and its formats.
struct HeadPlacement {
  int layer = 0;
  int kv_head = 0;
  PrecisionClass cls = PrecisionClass::kHot;
  KvTier tier = KvTier::kHot;
  std::string format;  // "K" or "K/V" when they differ, e.g. "int8/tq4"
};

struct EngineStats {
  int running = 0;
  int waiting = 0;
  uint64_t kv_bytes = 0;             // KV held by live sequences
  uint64_t steps = 0;
  uint64_t prompt_tokens_total = 0;
  uint64_t generated_tokens_total = 0;
  uint64_t preemptions_total = 0;  // sequences sent back to the queue to free KV (recomputed later)
  uint64_t recomputes_total = 0;   // sequences recomputed after a KV read fault
  uint64_t kv_faults_total = 0;    // KV read faults seen (each one recomputes or fails its sequence)
  KvStoreStats kv_store;           // tiers, classes, cold cache
  PrefixCacheStats prefix_cache;
  uint64_t class_changes_total = 0;  // heads moved between ACTIVE and SPARSE by online adaptation
  std::array<int, 3> kv_class_heads{};  // (layer, KV head) pairs per precision class
  double kv_bits_per_value = 0;         // of the configured layout
  uint64_t gpu_kv_capacity_bytes = 0;   // the GPU path's page pools (device and pinned); 0 on the CPU
  uint64_t gpu_kv_used_bytes = 0;
};

class Engine {
 public:
  // Loads the model and tokenizer and starts the engine thread.
  static StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options);
  ~Engine();  // cancels everything still running (kShutdown) and joins the thread

  // Queues a request. Errors (nothing is queued): invalid_argument (empty prompt, prompt longer than the
  // context, bad sampling parameters, duplicate id), unavailable (draining), resource_exhausted (queue full).
  // On success the sink receives events until one with `final`.
  Status Submit(GenerateRequest request, EventSink sink);

  // Cancels a waiting or running request; its final event has kAborted and its KV is freed within one step.
  // False when no live request has that id.
  bool Abort(const std::string& id);

  // Stops admitting new requests (Submit() returns unavailable); running and waiting ones continue.
  void StopAdmitting();
  // Ends every live request with kShutdown.
  void CancelAll();

  EngineStats Stats() const;
  const Model& model() const { return *model_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  int ctx_size() const { return ctx_size_; }
  // The current layout (online adaptation replaces it between steps).
  std::shared_ptr<const KvLayout> kv_layout() const;
  const KvPageStore& kv_store() const { return *store_; }
  bool on_gpu() const { return gpu_ != nullptr; }
  // [n_layers * n_kv_heads], layer-major, from the current layout (adaptation moves heads between steps).
  std::vector<HeadPlacement> HeadPlacements() const;

 private:
  struct Sequence;
  // KV a step or an admission needs: pages per class of the CPU store, or full pages per (layer, KV head) of
  // the GPU pools.
  struct KvNeed {
    std::array<uint64_t, 3> pages{};
    uint64_t gpu_pages = 0;
    KvNeed& operator+=(const KvNeed& o);
  };

  Engine() = default;
  void Loop();
  bool Step();  // one scheduling step; false when there was nothing to do
  void Admit();
  // Sends the most recently admitted running sequence back to the queue, its KV dropped (recomputed when it
  // runs again). False when fewer than two sequences run.
  bool PreemptNewest();
  // Prefix cache: extends the sequence's chain hashes to its first `n_tokens` tokens and tells its KV.
  void HashPages(Sequence& seq, int n_tokens);
  // Attaches the longest cached prefix to a sequence about to prefill from position 0.
  void ReusePrefix(Sequence& seq);
  // Offers the sequence's newly filled pages to the cache.
  void OfferPages(Sequence& seq);
  // Online adaptation after a step: feeds the window, applies the moves it decides.
  void Adapt();
  void Finish(Sequence& seq, FinishReason reason, Status error = Status::Ok());
  // What `n` more tokens after `have` add to one sequence, in passes of at most max_pass tokens.
  KvNeed Need(int have, int n, int max_pass) const;
  bool Fits(const KvNeed& need) const;
  // Drops a sequence's KV (CPU pages or GPU sequence); it recomputes from position 0.
  void ResetKv(Sequence& seq);
  // One forward pass over the batch (`owners`: the sequence of each token), on the CPU model or the GPU.
  Status Forward(const std::vector<BatchToken>& batch, const std::vector<Sequence*>& owners,
                 std::vector<float>* logits);

  EngineOptions options_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ThreadPool> pool_;
  std::shared_ptr<const KvLayout> kv_layout_;  // replaced under mu_ by Adapt (engine thread)
  std::unique_ptr<KvPageStore> store_;  // declared before the sequences, which return their pages to it
  std::unique_ptr<PrefixCache> cache_;  // null when off; holds references on store_ pages
  uint64_t fingerprint_ = 0;            // model + KV layout: seeds the prefix hash chains
  std::unique_ptr<HeadActivity> activity_;  // null without online adaptation
  std::unique_ptr<OnlineAdapter> adapter_;
  std::unique_ptr<gpu::Backend> gpu_;  // null on the CPU; declared before the sequences, which hold its KV
  int ctx_size_ = 0;

  mutable std::mutex mu_;  // guards waiting_, aborts_, ids_, stop_, admitting_, stats_
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::string> aborts_;
  std::unordered_map<std::string, int> ids_;  // live request ids
  bool stop_ = false;
  bool cancel_all_ = false;
  bool admitting_ = true;
  uint64_t next_order_ = 0;
  EngineStats stats_;

  std::vector<std::unique_ptr<Sequence>> running_;  // engine thread only
  std::thread thread_;
};

}  // namespace tq::engine
