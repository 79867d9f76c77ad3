// The engine: one loop that schedules every step (continuous batching with chunked prefill under a token budget),
// runs the model forward on a thread pool, samples, and streams tokens to each request's sink.
// The front ends see it through engine/api.h (EngineApi); the tools (bench, eval, calibrate) use this class and
// its accessors directly.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "engine/api.h"
#include "engine/grammar/grammar.h"
#include "engine/llm/model.h"
#include "engine/runner/chat_template.h"
#include "engine/runner/forward_path.h"
#include "engine/runner/request.h"
#include "engine/tokenizer/tokenizer.h"

namespace tq::engine {

class Engine final : public EngineApi {
 public:
  // Loads the model and tokenizer and starts the engine thread.
  static StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options);
  ~Engine() override;  // cancels everything still running (kShutdown) and joins the thread

  // EngineApi (engine/api.h says what each does).
  ModelInfo Info() const override;
  std::vector<int32_t> Tokenize(std::string_view text, TokenizeOptions options) const override;
  StatusOr<std::string> Detokenize(std::span<const int32_t> ids) const override;
  std::string TokenText(int32_t id) const override;
  StatusOr<std::vector<int32_t>> ChatPrompt(const std::vector<ChatMessage>& messages,
                                            const std::vector<ToolSpec>& tools = {}) const override;
  StatusOr<std::shared_ptr<const CompiledConstraint>> CompileConstraint(const ConstraintSpec& spec) const override;
  Status Submit(GenerateRequest request, EventSink sink) override;
  Status LoadLora(const std::string& name, const std::string& path, float scale) override;
  Status UnloadLora(const std::string& name) override;
  std::vector<LoraInfo> Loras() const override;
  bool Abort(const std::string& id) override;
  void StopAdmitting() override;
  void CancelAll() override;
  EngineStats Stats() const override;
  std::vector<HeadPlacement> HeadPlacements() const override;
  std::vector<KvEventRecord> KvEventsSince(uint64_t after, size_t max, int timeout_ms,
                                           uint64_t* first_available) const override;
  uint64_t LastKvEvent() const override;

  // For the tools and tests, not the front ends.
  const Model& model() const { return *model_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  int ctx_size() const { return ctx_size_; }
  // The current layout (online adaptation replaces it between steps).
  std::shared_ptr<const KvLayout> kv_layout() const;
  const KvPageStore& kv_store() const { return *store_; }
  bool on_gpu() const { return path_->on_gpu(); }
  // Model (shape, file checksum) and KV layout: the root of every prefix hash chain.
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  struct Sequence;

  Engine() = default;
  // Chooses the chat template (EngineOptions::chat_format); a model without a usable one serves no chat.
  Status SetUpChat();
  void Loop();
  bool Step();  // one scheduling step; false when there was nothing to do
  void Admit();
  // Sends the most recently admitted running sequence back to the queue, its KV dropped (recomputed when it
  // runs again). False when fewer than two sequences run.
  bool PreemptNewest();
  // Prefix cache: extends the sequence's chain hashes to its first `n_tokens` tokens and tells its KV.
  void HashPages(Sequence& seq, int n_tokens);
  static std::string CacheNamespace(const Sequence& seq);
  // Attaches the longest cached prefix to a sequence about to prefill from position 0.
  void ReusePrefix(Sequence& seq);
  // Offers the sequence's newly filled pages to the cache.
  void OfferPages(Sequence& seq);
  // Online adaptation after a step: feeds the window, applies the moves it decides.
  void Adapt();
  void Finish(Sequence& seq, FinishReason reason, Status error = Status::Ok());
  // What `n` more tokens after `have` add to one sequence, in passes of at most max_pass tokens.
  // Drops a sequence's KV (its pages and its path KV); it recomputes from position 0.
  void ResetKv(Sequence& seq);
  // One forward pass over the batch (`owners`: the sequence of each token) on the path.
  Status Forward(const std::vector<BatchToken>& batch, const std::vector<Sequence*>& owners,
                 std::vector<float>* logits, std::vector<float>* hidden);
  // Embed requests: folds this pass's hidden rows into their sequences and finishes those whose prompt is done.
  void PoolEmbeddings(const std::vector<BatchToken>& batch, const std::vector<Sequence*>& owners,
                      const std::vector<float>& hidden);

  EngineOptions options_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ConstraintCompiler> constraints_;  // structured output; internally synchronized
  std::unordered_set<TokenId> marker_tokens_;        // control tokens printed as text (ToolMarkerTexts)
  std::unique_ptr<ThreadPool> pool_;
  std::shared_ptr<const KvLayout> kv_layout_;  // replaced under mu_ by Adapt (engine thread)
  // The page store of the path: opened here on the CPU, the GPU backend's on the GPU. Declared before the path and
  // the sequences, which return their pages to it.
  std::shared_ptr<KvPageStore> store_;
  std::unique_ptr<PrefixCache> cache_;  // null when off; holds references on store_ pages
  uint64_t fingerprint_ = 0;            // model + KV layout: seeds the prefix hash chains
  std::unique_ptr<HeadActivity> activity_;  // null without online adaptation
  std::unique_ptr<OnlineAdapter> adapter_;
  // The CPU or the GPU; declared after what the CPU path refers to and before the sequences, which hold the GPU
  // path's KV.
  std::unique_ptr<ForwardPath> path_;
  int ctx_size_ = 0;
  mutable std::mutex lora_mu_;  // guards loras_
  std::map<std::string, std::shared_ptr<const LoraAdapter>> loras_;  // by name; sequences hold theirs
  std::optional<ChatTemplate> chat_;  // none: the model has no usable template (chat_unavailable_ says why)
  std::string chat_unavailable_;

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
