#include "engine/runner/engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <limits>
#include <string>
#include <unordered_map>

#include "engine/llm/lora.h"
#include "engine/runner/model_check.h"
#include "engine/runner/text_stream.h"
#include "storage/fault_queue.h"

namespace tq::engine {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// A sequence whose KV read back wrong is recomputed from its tokens at most this many times.
constexpr int kMaxRecomputes = 3;

// The GPU path for `layout` (one K and one V format everywhere): the device pool holds what
// kv_store.hot_bytes buys at the layout's bytes per token, at least one whole context.
StatusOr<std::unique_ptr<gpu::Backend>> CreateGpuBackend(const Model& model, const KvLayout& layout,
                                                         const EngineOptions& options, int ctx_size) {
  TQ_ASSIGN_OR_RETURN(auto formats, gpu::UniformFormats(layout));
  const HParams& hp = model.hparams();
  if (hp.sliding_window > 0 && ctx_size > hp.sliding_window) {
    return UnimplementedError("the GPU path has no sliding-window attention; this model's window is " +
                              std::to_string(hp.sliding_window) + " tokens and the context " +
                              std::to_string(ctx_size) + " (set ctx_size <= the window or use the CPU)");
  }
  const std::array<double, 3> per_class = layout.class_bytes_per_token();
  const double per_token = per_class[0] + per_class[1] + per_class[2];
  const double budget = static_cast<double>(options.kv_store.hot_bytes);
  const int64_t pool_tokens =
      std::max<int64_t>(ctx_size, per_token > 0 ? static_cast<int64_t>(budget / per_token) : 0);
  gpu::GpuModelOptions o;  // checked by Backend::Create before it looks for a device
  o.k_format = formats.first;
  o.v_format = formats.second;
  o.max_tokens = ctx_size;
  o.pool_tokens = static_cast<int>(std::min<int64_t>(pool_tokens, std::numeric_limits<int>::max()));
  o.warm_heads_fraction = options.gpu_warm_fraction;
  o.cold_heads_fraction = options.gpu_cold_fraction;
  // The GPU path's own files: a subdirectory, so the CPU store's recovery never sees them.
  o.cold.cold_dir = options.kv_store.cold_dir.empty() ? "" : options.kv_store.cold_dir + "/gpu";
  o.cold.capacity_bytes = options.kv_store.cold_bytes;
  o.cold.direct_io = options.kv_store.direct_io;
  o.cold.io.backend = options.kv_store.io_backend;
  o.cold.io.queue_depth = options.kv_store.io_depth;
  return gpu::Backend::Create(model, o);
}

}  // namespace

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAborted: return "abort";
    case FinishReason::kShutdown: return "shutdown";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

struct Engine::Sequence {
  Sequence(GenerateRequest r, EventSink s, std::shared_ptr<const KvLayout> layout, int ctx, KvPageStore* store,
           int vocab_size)
      : req(std::move(r)),
        sink(std::move(s)),
        kv(std::move(layout), ctx, store),
        sampler(req.sampling),
        text(req.stop) {
    kv.set_owner(req.id);
    if (req.constraint) matcher.emplace(req.constraint, vocab_size);
  }

  // Tokens whose KV a prefill computes: the prompt, or, after a preemption or a fault, every token but the last
  // generated one (which the next decode step feeds).
  int prefill_end() const {
    const int n = static_cast<int>(tokens.size());
    return n > n_prompt ? n - 1 : n_prompt;
  }
  bool decoding() const { return n_computed >= prefill_end(); }

  uint64_t kv_bytes() const { return kv.bytes() + (gpu ? gpu->bytes() : 0); }

  GenerateRequest req;
  EventSink sink;
  SequenceKv kv;                        // CPU pages (empty on the GPU path)
  std::shared_ptr<const LoraAdapter> lora;  // the adapter it runs under (null: the base model)
  PathKv gpu;                            // the GPU path's KV: made at the sequence's first forward pass
  Sampler sampler;
  std::optional<TokenMatcher> matcher;  // structured output: masks the logits, ends the output when complete
  std::vector<float> pooled;            // embed: [n_embd] sum (mean) or the chosen row of the final hidden states
  int pooled_rows = 0;
  TextStream text;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int n_prompt = 0;
  int n_computed = 0;           // tokens[0, n_computed) have their KV in the cache
  uint64_t order = 0;           // FCFS among equal priorities
  int recomputes = 0;           // after KV read faults
  std::vector<uint64_t> hashes;  // prefix chain hash of each full page of tokens
  int offered = 0;               // pages offered to the prefix cache
  int cached_tokens = -1;        // prompt tokens whose KV came from the cache at first admission (-1: not yet)
  Clock::time_point submitted, admitted, first_token;
  bool done = false;
};

StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options) {
  std::unique_ptr<Engine> e(new Engine());
  e->options_ = options;
  TQ_ASSIGN_OR_RETURN(e->model_, Model::Open(options.model_path));
  const uint32_t content = ModelChecksum(e->model_->gguf(), options.load_progress);
  TQ_ASSIGN_OR_RETURN(e->tokenizer_, Tokenizer::FromGguf(e->model_->gguf()));
  TQ_RETURN_IF_ERROR(e->SetUpChat());
  // Tool-call markers that the vocabulary holds as control tokens are produced and printed as their text.
  const std::vector<std::string> markers = ToolMarkerTexts();
  for (const std::string& m : markers) {
    const TokenId id = e->tokenizer_->TextToToken(m);
    if (id != kNoToken && e->tokenizer_->token_type(id) == TokenType::kControl) e->marker_tokens_.insert(id);
  }
  TQ_ASSIGN_OR_RETURN(e->constraints_,
                      ConstraintCompiler::Create(*e->tokenizer_, e->model_->hparams().vocab_size, markers));
  const int trained = e->model_->hparams().n_ctx_train;
  e->ctx_size_ = options.ctx_size > 0 ? options.ctx_size : trained;
  if (e->ctx_size_ > trained) {
    spdlog::warn("context {} is longer than the model's trained context {}", e->ctx_size_, trained);
  }
  TQ_ASSIGN_OR_RETURN(e->kv_layout_, KvLayout::Create(e->model_->hparams(), options.kv));
  {
    // K and V of every (layer, KV head) for one sequence of the configured context, in MiB.
    const HParams& shape = e->model_->hparams();
    const double values = 2.0 * shape.n_layers * shape.n_kv_heads * shape.head_dim * static_cast<double>(e->ctx_size_);
    const double bits = e->kv_layout_->bits_per_value();
    const double mib = values * bits / 8 / (1 << 20), f16_mib = values * 2 / (1 << 20);
    spdlog::info("KV cache: {}; {:.2f} bits per value: {:.1f} MiB per {}-token sequence, {:.1f} MiB less than f16 "
                 "({:.2f}x smaller)",
                 e->kv_layout_->Describe(), bits, mib, e->ctx_size_, f16_mib - mib, bits > 0 ? 16.0 / bits : 0.0);
  }
  std::unique_ptr<gpu::Backend> gpu;  // null on the CPU
  if (options.device == "cuda") {
    TQ_ASSIGN_OR_RETURN(gpu, CreateGpuBackend(*e->model_, *e->kv_layout_, options, e->ctx_size_));
    spdlog::info("GPU: {}", gpu->Describe());
  } else if (options.device != "cpu") {
    return InvalidArgumentError("device '" + options.device + "' is not one of cpu, cuda");
  }
  // The fingerprint names the model (its shape and the checksum of its file) and the KV layout: cached pages are
  // valid only under the same one.
  const HParams& hp = e->model_->hparams();
  e->fingerprint_ = PrefixHash(e->kv_layout_->fingerprint(),
                               std::vector<int32_t>{hp.n_layers, hp.n_embd, hp.n_heads, hp.n_kv_heads, hp.vocab_size,
                                                    static_cast<int32_t>(e->model_->weight_bytes() >> 10),
                                                    static_cast<int32_t>(content)});
  KvStoreOptions store_options = options.kv_store;
  // The default cold directory serves SPARSE heads: a layout without any (uniform:f16, say) runs without it.
  if (store_options.cold_optional && e->kv_layout_->class_heads()[2] == 0) store_options.cold_dir.clear();
  store_options.head_dim = static_cast<uint32_t>(std::max(hp.head_dim, 1));
  const bool caching = options.prefix_cache_bytes > 0 && e->kv_layout_->all_paged() && !gpu;
  if (gpu && options.prefix_cache_bytes > 0) spdlog::info("prefix cache: off on the GPU path");
  store_options.fingerprint = caching ? e->fingerprint_ : 0;
  if (store_options.io_latency_us > 0 && !store_options.wrap_queue && !store_options.cold_dir.empty()) {
    // Fault injection for the chaos bench: a slow disk under the real backend.
    const uint32_t latency_us = store_options.io_latency_us;
    store_options.wrap_queue = [latency_us](std::unique_ptr<storage::IoQueue> inner) {
      auto queue = std::make_unique<storage::FaultQueue>(std::move(inner), /*seed=*/1);
      storage::FaultRule rule;
      rule.kind = storage::FaultKind::kLatency;
      rule.every = 1;
      rule.latency_us = latency_us;
      queue->AddRule(rule);
      return std::unique_ptr<storage::IoQueue>(std::move(queue));
    };
    spdlog::warn("KV cold tier: injected latency of {} us on every read and write (kv.io_latency_us, testing only)",
                 latency_us);
  }
  if (gpu) {
    e->store_ = gpu->store();  // the device, pinned and disk tiers (disk in cold_dir/gpu)
  } else {
    TQ_ASSIGN_OR_RETURN(e->store_, KvPageStore::Open(store_options, e->kv_layout_->class_page_bytes()));
  }
  spdlog::info("KV tiers: {}", e->store_->Describe());
  if (options.kv_adapt) {
    if (gpu) {
      spdlog::warn("KV online adaptation is off: the GPU path keeps one format for every head");
    } else if (e->kv_layout_->adaptable()) {
      e->activity_ = std::make_unique<HeadActivity>(hp.n_layers, hp.n_kv_heads);
      e->adapter_ = std::make_unique<OnlineAdapter>(hp.n_layers, hp.n_kv_heads, e->kv_layout_->classes(), options.adapt);
      spdlog::info("KV online adaptation: window {} steps, a decision every {} steps", options.adapt.window,
                   options.adapt.every);
    } else {
      spdlog::warn("KV online adaptation is off: it needs a ranked preset (code, longdoc, chat, auto) whose ACTIVE "
                   "and SPARSE values are compressed");
    }
  }
  if (caching) {
    e->cache_ = std::make_unique<PrefixCache>(e->store_.get(), hp.n_layers, hp.n_kv_heads, options.prefix_cache_bytes,
                                              options.prefix_pin_seconds);
    e->cache_->Adopt(e->store_->TakeRecovered(), e->fingerprint_);
  }
  e->stats_.kv_class_heads = e->kv_layout_->class_heads();
  e->stats_.kv_store = e->store_->Stats();  // before the first step: tiers, and why an optional cold tier is off
  e->stats_.kv_bits_per_value = e->kv_layout_->bits_per_value();
  e->pool_ = std::make_unique<ThreadPool>(options.threads);
  e->path_ = gpu ? MakeGpuPath(std::move(gpu)) : MakeCpuPath(*e->model_, *e->pool_, e->kv_layout_);
  e->thread_ = std::thread([raw = e.get()] { raw->Loop(); });
  for (const LoraSpec& l : options.loras) TQ_RETURN_IF_ERROR(e->LoadLora(l.name, l.path, l.scale));
  return e;
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cancel_all_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // The prefix cache outlives the process through the cold tier: free the sequences, then move every page only
  // the cache holds to disk and wait for the writes.
  running_.clear();
  waiting_.clear();
  if (cache_ && store_->has_cold_tier()) {
    const size_t moved = cache_->Demote(SIZE_MAX);
    store_->FlushCold();
    if (moved > 0) spdlog::info("prefix cache: {} pages moved to the cold tier for the next start", moved);
  }
}

Status Engine::Submit(GenerateRequest request, EventSink sink) {
  if (request.prompt.empty()) return InvalidArgumentError("the prompt is empty");
  if (static_cast<int>(request.prompt.size()) >= ctx_size_) {
    return InvalidArgumentError("the prompt has " + std::to_string(request.prompt.size()) +
                                " tokens; the context is " + std::to_string(ctx_size_) +
                                " tokens and must leave room for at least one generated token");
  }
  for (int32_t t : request.prompt) {
    if (t < 0 || t >= model_->hparams().vocab_size) {
      return InvalidArgumentError("prompt token id " + std::to_string(t) + " is outside the vocabulary");
    }
  }
  TQ_RETURN_IF_ERROR(ValidateSamplingParams(request.sampling));
  if (request.max_tokens < 0) return InvalidArgumentError("max_tokens must be >= 0");
  if (request.top_logprobs < 0 || request.top_logprobs > 20) {
    return InvalidArgumentError("top_logprobs must be in [0, 20]");
  }
  TQ_RETURN_IF_ERROR(path_->Supports(request.embed, !request.lora.empty()));
  if (request.embed && request.constraint) return InvalidArgumentError("an embedding takes no output constraint");
  std::shared_ptr<const LoraAdapter> lora;
  if (!request.lora.empty()) {
    std::lock_guard<std::mutex> lock(lora_mu_);
    auto it = loras_.find(request.lora);
    if (it == loras_.end()) {
      std::string names;
      for (const auto& [n, a] : loras_) names += (names.empty() ? "" : ", ") + n;
      return NotFoundError("no LoRA adapter named '" + request.lora + "' (loaded: " +
                           (names.empty() ? "none" : names) + ")");
    }
    lora = it->second;
  }
  auto seq = std::make_unique<Sequence>(std::move(request), std::move(sink), kv_layout(), ctx_size_, store_.get(),
                                        model_->hparams().vocab_size);
  seq->kv.set_activity(activity_.get());
  seq->lora = std::move(lora);
  seq->tokens = seq->req.prompt;
  seq->n_prompt = static_cast<int>(seq->tokens.size());
  seq->submitted = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!admitting_ || stop_) return UnavailableError("the server is draining and admits no new requests");
    if (static_cast<int>(waiting_.size()) >= options_.max_waiting) {
      return ResourceExhaustedError("the request queue is full (" + std::to_string(waiting_.size()) + " waiting)");
    }
    if (ids_.count(seq->req.id) != 0) return InvalidArgumentError("request id '" + seq->req.id + "' is in use");
    ids_[seq->req.id] = 1;
    seq->order = ++next_order_;
    // Keep waiting_ sorted: higher priority first, then arrival.
    auto at = std::find_if(waiting_.begin(), waiting_.end(),
                           [&](const auto& w) { return w->req.priority < seq->req.priority; });
    waiting_.insert(at, std::move(seq));
    ++stats_.waiting;
  }
  cv_.notify_all();
  return Status::Ok();
}

bool Engine::Abort(const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ids_.count(id) == 0) return false;
    aborts_.push_back(id);
  }
  cv_.notify_all();
  return true;
}

void Engine::StopAdmitting() {
  std::lock_guard<std::mutex> lock(mu_);
  admitting_ = false;
}

void Engine::CancelAll() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_all_ = true;
  }
  cv_.notify_all();
}

std::shared_ptr<const KvLayout> Engine::kv_layout() const {
  std::lock_guard<std::mutex> lock(mu_);
  return kv_layout_;
}

std::vector<HeadPlacement> Engine::HeadPlacements() const {
  const std::shared_ptr<const KvLayout> layout = kv_layout();
  std::vector<HeadPlacement> out;
  for (int l = 0; l < layout->n_layers(); ++l) {
    const LayerKvFormat& f = layout->layer(l);
    for (int h = 0; h < static_cast<int>(f.heads.size()); ++h) {
      const HeadKvFormat& head = f.heads[static_cast<size_t>(h)];
      out.push_back({l, h, head.cls, store_->home(head.cls), kernels::FormatPairName(head.k, head.v)});
    }
  }
  return out;
}

void Engine::Adapt() {
  if (!adapter_) return;
  std::vector<int64_t> scored, skipped;
  activity_->Take(&scored, &skipped);
  adapter_->EndStep(scored, skipped);
  const std::vector<ClassChange> changes = adapter_->Decide();
  if (changes.empty()) return;
  std::shared_ptr<const KvLayout> layout = kv_layout_->WithClasses(adapter_->classes());
  for (const ClassChange& c : changes) {
    spdlog::info("KV online adaptation: layer {} head {}: {} -> {}", c.layer, c.kv_head, PrecisionClassName(c.from),
                 PrecisionClassName(c.to));
  }
  // New pages take the new formats; pages of heads that lost bits are re-encoded now (promotions cannot restore
  // precision and are not attempted).
  for (auto& seq : running_) {
    seq->kv.SetLayout(layout);
    for (const ClassChange& c : changes) {
      if (c.to != PrecisionClass::kSparse) continue;
      if (Status s = seq->kv.Demote(c.layer, c.kv_head); !s.ok()) {
        spdlog::warn("request {}: demotion of layer {} head {}: {}", seq->req.id, c.layer, c.kv_head, s.ToString());
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& seq : waiting_) seq->kv.SetLayout(layout);  // queued or preempted: no pages yet
  kv_layout_ = layout;
  stats_.class_changes_total += changes.size();
  stats_.kv_class_heads = layout->class_heads();
}

EngineStats Engine::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Engine::Finish(Sequence& seq, FinishReason reason, Status error) {
  if (seq.done) return;
  seq.done = true;
  const Clock::time_point now = Clock::now();
  GenerateEvent ev;
  ev.text = reason == FinishReason::kStop || reason == FinishReason::kLength ? seq.text.Flush() : "";
  ev.final = true;
  ev.finish_reason = reason;
  ev.error = std::move(error);
  ev.usage.prompt_tokens = seq.n_prompt;
  ev.usage.completion_tokens = static_cast<int>(seq.tokens.size()) - seq.n_prompt;
  ev.usage.cached_prompt_tokens = std::max(seq.cached_tokens, 0);
  if (seq.req.embed && reason == FinishReason::kStop) ev.embedding = std::move(seq.pooled);
  const bool started = seq.admitted != Clock::time_point{};
  const bool produced = seq.first_token != Clock::time_point{};
  ev.timings.queue_seconds = Seconds(seq.submitted, started ? seq.admitted : now);
  ev.timings.total_seconds = Seconds(seq.submitted, now);
  if (produced) {
    ev.timings.time_to_first_token_seconds = Seconds(seq.submitted, seq.first_token);
    const double prefill = Seconds(seq.admitted, seq.first_token);
    if (prefill > 0) ev.timings.prompt_tokens_per_second = seq.n_prompt / prefill;
    const double decode = Seconds(seq.first_token, now);
    if (decode > 0 && ev.usage.completion_tokens > 1) {
      ev.timings.generated_tokens_per_second = (ev.usage.completion_tokens - 1) / decode;
    }
  }
  {
    // The id is released before the final event goes out: a client that reacts to it cannot abort a request
    // that no longer exists.
    std::lock_guard<std::mutex> lock(mu_);
    ids_.erase(seq.req.id);
  }
  seq.sink(std::move(ev));
}

void Engine::ResetKv(Sequence& seq) {
  seq.kv.Reset();
  seq.gpu.reset();
  seq.pooled.clear();  // an embedding is recomputed from position 0 with its KV
  seq.pooled_rows = 0;
}

Status Engine::Forward(const std::vector<BatchToken>& batch, const std::vector<Sequence*>& owners,
                       std::vector<float>* logits, std::vector<float>* hidden) {
  thread_local std::vector<PathKv*> kvs;
  kvs.clear();
  for (Sequence* seq : owners) kvs.push_back(&seq->gpu);
  return path_->Forward(batch, kvs, logits, hidden);
}

void Engine::Admit() {
  std::vector<std::unique_ptr<Sequence>> rejected;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Admission by KV budget: the pages the running sequences still need for their prefill, plus the newcomer's
    // whole prefill, must fit the tiers now. Decode growth past that is met by preemption (Step).
    KvNeed reserved;
    const int pass = options_.max_batch_tokens;  // prefill chunks are at most this long
    for (const auto& r : running_) reserved += path_->Need(r->n_computed, r->prefill_end() - r->n_computed, pass);
    while (!waiting_.empty() && static_cast<int>(running_.size()) < options_.max_running) {
      Sequence& w = *waiting_.front();
      KvNeed need = reserved;
      need += path_->Need(0, w.prefill_end(), pass);
      if (!store_->Fits(need.pages)) {
        if (cache_ && cache_->EvictOne(Clock::now())) continue;  // cached prefixes go before requests wait
        if (!running_.empty()) break;  // wait for running sequences to finish
        rejected.push_back(std::move(waiting_.front()));  // alone and still too big: it can never run
        waiting_.pop_front();
        continue;
      }
      reserved = need;
      if (w.admitted == Clock::time_point{}) w.admitted = Clock::now();
      running_.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
      ReusePrefix(*running_.back());
    }
    // The gauges move with admission, not at the end of the step: the step emits the first token, and a
    // client that reads it and then asks for the counts must see its request running (the end-of-step update
    // was racy).
    stats_.running = static_cast<int>(running_.size());
    stats_.waiting = static_cast<int>(waiting_.size());
  }
  for (auto& seq : rejected) {
    const KvNeed need = path_->Need(0, seq->prefill_end(), options_.max_batch_tokens);
    const uint64_t pages = need.pages[0] + need.pages[1] + need.pages[2];
    Finish(*seq, FinishReason::kError,
           ResourceExhaustedError("the prompt's KV (" + std::to_string(pages) +
                                  " pages) does not fit the KV tier budgets (" + store_->Describe() + ")"));
  }
}

// The prefix-cache namespace of a sequence: its cache salt and, under a LoRA adapter, the adapter's name, file
// checksum and scale (pages computed under one adapter are never another's, nor the base model's).
std::string Engine::CacheNamespace(const Sequence& seq) {
  if (!seq.lora) return seq.req.cache_salt;
  char lora[128];
  std::snprintf(lora, sizeof lora, "\x1flora:%08x:%.9g:", seq.lora->checksum(), seq.lora->user_scale());
  return seq.req.cache_salt + lora + seq.lora->name();
}

void Engine::HashPages(Sequence& seq, int n_tokens) {
  if (!cache_) return;
  constexpr int kPage = kernels::kPageTokens;
  const int pages = std::min(n_tokens, static_cast<int>(seq.tokens.size())) / kPage;
  while (static_cast<int>(seq.hashes.size()) < pages) {
    const size_t k = seq.hashes.size();
    const uint64_t parent = k == 0 ? fingerprint_ : seq.hashes[k - 1];
    const uint64_t seed = k == 0 ? SaltedRoot(fingerprint_, CacheNamespace(seq)) : parent;
    seq.hashes.push_back(PrefixHash(seed, std::span<const int32_t>(seq.tokens).subspan(k * kPage, kPage)));
    seq.kv.SetPageHash(static_cast<int>(k), seq.hashes[k], parent);
  }
}

void Engine::ReusePrefix(Sequence& seq) {
  if (!cache_ || seq.n_computed != 0 || seq.req.embed) return;
  constexpr int kPage = kernels::kPageTokens;
  const int end = seq.prefill_end();
  HashPages(seq, end);
  // A fresh prompt keeps at least its last token to compute (its logits give the first output token).
  const bool fresh = static_cast<int>(seq.tokens.size()) == seq.n_prompt;
  const size_t usable = static_cast<size_t>(fresh ? (end - 1) / kPage : end / kPage);
  const auto hashes = std::span<const uint64_t>(seq.hashes).first(std::min(usable, seq.hashes.size()));
  const std::vector<const PrefixEntry*> hit = cache_->Lookup(hashes, Clock::now());
  Status s = seq.kv.AttachPrefix(hit);
  if (!s.ok()) {
    spdlog::warn("request {}: cached prefix not used: {}", seq.req.id, s.ToString());
    seq.kv.Reset();
    return;
  }
  seq.n_computed = static_cast<int>(hit.size()) * kPage;
  seq.offered = static_cast<int>(hit.size());
  for (size_t k = 0; k < seq.hashes.size(); ++k) seq.kv.SetPageHash(static_cast<int>(k), seq.hashes[k], k ? seq.hashes[k - 1] : fingerprint_);
  cache_->CountLookup(static_cast<uint64_t>(seq.n_computed));
  if (seq.cached_tokens < 0) seq.cached_tokens = std::min(seq.n_computed, seq.n_prompt);
}

void Engine::OfferPages(Sequence& seq) {
  if (!cache_) return;
  const int full = seq.kv.full_pages();
  const Clock::time_point now = Clock::now();
  for (int k = seq.offered; k < full && k < static_cast<int>(seq.hashes.size()); ++k) {
    const uint64_t parent = k == 0 ? fingerprint_ : seq.hashes[k - 1];
    if (!cache_->Contains(seq.hashes[k])) {
      cache_->Insert(seq.hashes[k], parent, static_cast<uint32_t>(k), seq.kv.PageIdsAt(k),
                     k == 0 ? seq.kv.Transforms() : std::vector<HeadTransform>{}, now);
    }
    seq.offered = k + 1;
  }
}

bool Engine::PreemptNewest() {
  if (running_.size() < 2) return false;
  auto newest = std::max_element(running_.begin(), running_.end(),
                                 [](const auto& a, const auto& b) { return a->order < b->order; });
  std::unique_ptr<Sequence> seq = std::move(*newest);
  running_.erase(newest);
  spdlog::info("KV tiers full: request {} goes back to the queue ({} tokens to recompute)", seq->req.id,
               seq->n_computed);
  ResetKv(*seq);
  seq->n_computed = 0;
  seq->offered = 0;
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.preemptions_total;
  waiting_.push_front(std::move(seq));
  return true;
}

bool Engine::Step() {
  // Aborts and cancellation first, so their pages go within one step.
  std::vector<std::string> aborts;
  bool cancel_all;
  std::deque<std::unique_ptr<Sequence>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborts.swap(aborts_);
    cancel_all = cancel_all_;
    cancel_all_ = false;
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      const bool hit = cancel_all || std::find(aborts.begin(), aborts.end(), (*it)->req.id) != aborts.end();
      if (hit) {
        dropped.push_back(std::move(*it));
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& seq : dropped) Finish(*seq, cancel_all ? FinishReason::kShutdown : FinishReason::kAborted);
  for (auto& seq : running_) {
    if (cancel_all) Finish(*seq, FinishReason::kShutdown);
    if (std::find(aborts.begin(), aborts.end(), seq->req.id) != aborts.end()) Finish(*seq, FinishReason::kAborted);
  }
  std::erase_if(running_, [](const auto& s) { return s->done; });
  store_->Maintain();
  Admit();
  if (running_.empty()) return !dropped.empty();

  // Batch: every decoding sequence's next token, then prefill chunks under the remaining budget. When the
  // tiers cannot take the pages the batch fills, the newest sequence goes back to the queue and the batch is
  // planned again.
  std::vector<BatchToken> batch;
  std::vector<Sequence*> owners;       // sequence of each batch token
  std::vector<Sequence*> logit_owner;  // sequence of each logits row
  for (;;) {
    batch.clear();
    owners.clear();
    logit_owner.clear();
    KvNeed pages;
    int budget = options_.max_batch_tokens;
    for (auto& seq : running_) {
      if (!seq->decoding() || budget <= 0) continue;
      batch.push_back({seq->tokens[seq->n_computed], seq->n_computed, &seq->kv, true, false, seq->lora.get()});
      owners.push_back(seq.get());
      logit_owner.push_back(seq.get());
      pages += path_->Need(seq->n_computed, 1, 1);
      --budget;
    }
    for (auto& seq : running_) {
      if (seq->decoding() || budget <= 0) continue;
      const int end = seq->prefill_end();
      const int chunk = std::min(budget, end - seq->n_computed);
      // Logits at the end of the prompt only: a recomputed sequence already sampled its next token. An embedding
      // takes hidden states instead: every position's (mean), or one.
      const bool embed = seq->req.embed;
      const bool sample = !embed && static_cast<int>(seq->tokens.size()) == seq->n_prompt;
      const int pooling = model_->hparams().pooling_type;
      for (int i = 0; i < chunk; ++i) {
        const int pos = seq->n_computed + i;
        const bool last = sample && pos == end - 1;
        const bool hidden = embed && (pooling == 3 ? pos == end - 1 : pooling == 2 ? pos == 0 : true);
        batch.push_back({seq->tokens[pos], pos, &seq->kv, last, hidden, seq->lora.get()});
        owners.push_back(seq.get());
        if (last) logit_owner.push_back(seq.get());
      }
      pages += path_->Need(seq->n_computed, chunk, chunk);
      budget -= chunk;
    }
    if (store_->Fits(pages.pages)) break;
    if (cache_ && cache_->EvictOne(Clock::now())) continue;  // cached prefixes go before running sequences
    if (!PreemptNewest()) break;
  }
  if (batch.empty()) return false;
  // Chain hashes of the pages this batch fills, so each page records its prefix as it is stored.
  std::unordered_map<const SequenceKv*, int> batch_tokens;  // tokens of each sequence in this batch
  for (const BatchToken& t : batch) ++batch_tokens[t.kv];
  for (auto& seq : running_) HashPages(*seq, seq->n_computed + batch_tokens[&seq->kv]);

  std::vector<float> logits, hidden;
  const bool any_embed = std::any_of(batch.begin(), batch.end(), [](const BatchToken& t) { return t.want_hidden; });
  Status s = Forward(batch, owners, &logits, any_embed ? &hidden : nullptr);
  std::vector<Sequence*> faulted;
  if (!s.ok()) {
    for (auto& seq : running_) {
      if (!seq->kv.fault().ok()) faulted.push_back(seq.get());
    }
    if (faulted.empty()) {
      spdlog::error("forward pass failed: {}", s.ToString());
      for (auto& seq : running_) Finish(*seq, FinishReason::kError, s);
      std::erase_if(running_, [](const auto& q) { return q->done; });
      return true;
    }
    // The pass finished for everyone; the faulted sequences start again from their tokens.
    for (Sequence* seq : faulted) {
      const Status fault = seq->kv.fault();
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.kv_faults_total;
        if (seq->recomputes < kMaxRecomputes) ++stats_.recomputes_total;
      }
      if (++seq->recomputes > kMaxRecomputes) {
        spdlog::error("request {}: KV read fault again after {} recomputes: {}", seq->req.id, kMaxRecomputes,
                      fault.ToString());
        Finish(*seq, FinishReason::kError,
               DataLossError("the KV cache of this request could not be read back: " + fault.message()));
      } else {
        spdlog::warn("request {}: KV read fault, recomputing {} tokens: {}", seq->req.id, seq->n_computed,
                     fault.ToString());
      }
      // The bad page may be shared through the prefix cache: drop what this sequence's prefix names.
      if (cache_) {
        for (uint64_t h : seq->hashes) cache_->Erase(h);
      }
      ResetKv(*seq);
      seq->n_computed = 0;
      seq->offered = 0;
    }
  }
  auto is_faulted = [&](const Sequence* q) { return std::find(faulted.begin(), faulted.end(), q) != faulted.end(); };
  uint64_t prompt_tokens = 0;
  for (const BatchToken& t : batch) {
    for (auto& seq : running_) {
      if (&seq->kv == t.kv && !is_faulted(seq.get())) {
        seq->n_computed = std::max(seq->n_computed, t.pos + 1);
        if (t.pos < seq->n_prompt) ++prompt_tokens;
      }
    }
  }
  for (auto& seq : running_) {
    if (!is_faulted(seq.get()) && !seq->done) OfferPages(*seq);
  }
  if (any_embed) {
    std::vector<Sequence*> pooled_owners = owners;
    for (Sequence*& o : pooled_owners) {
      if (is_faulted(o)) o = nullptr;  // recomputed from position 0 (ResetKv cleared its sum)
    }
    PoolEmbeddings(batch, pooled_owners, hidden);
  }

  const int V = model_->hparams().vocab_size;
  uint64_t generated = 0;
  for (size_t row = 0; row < logit_owner.size(); ++row) {
    Sequence& seq = *logit_owner[row];
    if (is_faulted(&seq) || seq.done) continue;
    std::span<float> l(logits.data() + row * V, V);
    GeneratedToken out;
    GenerateEvent ev;
    if (seq.req.logprobs || seq.req.top_logprobs > 0) {
      // Log-probabilities of the model's distribution, before the constraint, penalties and temperature.
      std::vector<float> raw(l.begin(), l.end());
      if (seq.matcher) seq.matcher->Mask(l);
      out.id = seq.sampler.Sample(l, seq.tokens);
      out.logprob = LogprobOf(raw, out.id).logprob;
      out.top = TopLogprobs(raw, seq.req.top_logprobs);
    } else {
      if (seq.matcher) seq.matcher->Mask(l);
      out.id = seq.sampler.Sample(l, seq.tokens);
    }
    if (seq.matcher && !seq.matcher->Accept(out.id)) {
      // The mask allowed only accepted tokens: a refusal is a bug in the mask engine, not the request's fault.
      Finish(seq, FinishReason::kError,
             InternalError("structured output: token " + std::to_string(out.id) + " was sampled but not accepted"));
      continue;
    }
    ++generated;
    if (seq.first_token == Clock::time_point{}) seq.first_token = Clock::now();
    seq.tokens.push_back(out.id);
    // A constraint allows end-of-generation only where the output is complete, so it ends the output even with
    // ignore_eos.
    const bool eog = (!seq.req.ignore_eos || seq.matcher) && tokenizer_->IsEndOfGeneration(out.id);
    const bool stop_token =
        std::find(seq.req.stop_tokens.begin(), seq.req.stop_tokens.end(), out.id) != seq.req.stop_tokens.end();
    if (!eog && !stop_token) ev.text = seq.text.Push(tokenizer_->TokenToPiece(out.id, marker_tokens_.count(out.id) > 0));
    ev.tokens.push_back(std::move(out));
    const int n_gen = static_cast<int>(seq.tokens.size()) - seq.n_prompt;
    FinishReason reason = FinishReason::kNone;
    if (eog || stop_token || seq.text.stopped() || (seq.matcher && seq.matcher->terminated())) {
      reason = FinishReason::kStop;
    } else if ((seq.req.max_tokens > 0 && n_gen >= seq.req.max_tokens) ||
               static_cast<int>(seq.tokens.size()) >= ctx_size_) {
      reason = FinishReason::kLength;
    }
    seq.sink(std::move(ev));
    if (reason != FinishReason::kNone) Finish(seq, reason);
  }
  std::erase_if(running_, [](const auto& q) { return q->done; });

  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.steps;
  stats_.prompt_tokens_total += prompt_tokens;
  stats_.generated_tokens_total += generated;
  return true;
}

void Engine::PoolEmbeddings(const std::vector<BatchToken>& batch, const std::vector<Sequence*>& owners,
                            const std::vector<float>& hidden) {
  const size_t E = static_cast<size_t>(model_->hparams().n_embd);
  size_t row = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!batch[i].want_hidden) continue;
    const float* h = hidden.data() + row++ * E;
    Sequence* seq = owners[i];
    if (seq == nullptr || seq->done) continue;
    if (seq->pooled.empty()) seq->pooled.assign(E, 0.0f);
    for (size_t d = 0; d < E; ++d) seq->pooled[d] += h[d];
    ++seq->pooled_rows;
  }
  for (auto& seq : running_) {
    if (!seq->req.embed || seq->done || seq->n_computed < seq->n_prompt || seq->pooled_rows == 0) continue;
    // Mean of the rows (one row for first/last pooling), then unit length.
    double norm = 0;
    for (float& v : seq->pooled) {
      v /= static_cast<float>(seq->pooled_rows);
      norm += static_cast<double>(v) * v;
    }
    const float scale = norm > 0 ? static_cast<float>(1.0 / std::sqrt(norm)) : 0.0f;
    for (float& v : seq->pooled) v *= scale;
    if (seq->first_token == Clock::time_point{}) seq->first_token = Clock::now();
    Finish(*seq, FinishReason::kStop);
  }
}

void Engine::Loop() {
  size_t last_running = 0;  // a sequence finished when the running count drops: its cached pages may move
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || cancel_all_ || !aborts_.empty() || !waiting_.empty() || !running_.empty(); });
      if (stop_ && waiting_.empty() && running_.empty() && !cancel_all_) return;
    }
    Step();
    Adapt();
    // Gauges after every step, whichever way it ended (a step that only cancelled still frees KV).
    uint64_t kv = 0;
    for (const auto& seq : running_) kv += seq->kv_bytes();
    // Pages only the prefix cache still holds go to the cold tier (durable, out of RAM), a bounded number per step.
    if (cache_ && running_.size() < last_running) cache_->Demote(1024);
    last_running = running_.size();
    KvStoreStats kv_store = store_->Stats();
    PrefixCacheStats prefix = cache_ ? cache_->stats() : PrefixCacheStats{};
    std::lock_guard<std::mutex> lock(mu_);
    stats_.kv_store = kv_store;
    stats_.prefix_cache = prefix;
    stats_.running = static_cast<int>(running_.size());
    stats_.waiting = static_cast<int>(waiting_.size());
    stats_.kv_bytes = kv;
    if (stop_ && waiting_.empty() && running_.empty()) return;
  }
}

}  // namespace tq::engine
