// The engine as the front ends see it: the one engine header that server/ includes (tests/unit/layering checks
// it). Plain values in and out; errors are tq::Status, which a front end turns into an HTTP or gRPC code once,
// where it answers. Every method may be called from any thread.
//
// A request's path (docs/architecture.md): the front end tokenizes (Tokenize, ChatPrompt) and admits it
// (server/generation.h); Submit() queues it; the engine thread runs it in its step loop and calls the sink with
// events; Abort() ends it early.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/kv/stats.h"
#include "engine/options.h"
#include "engine/runner/chat_template.h"
#include "engine/runner/request.h"
#include "engine/runner/tool_calls.h"

namespace tq::engine {

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
};

// What the engine serves: the model's shape, its chat format and its KV configuration.
struct ModelInfo {
  std::string architecture;  // GGUF general.architecture: "llama", "qwen2", "gemma3", ...
  std::string name;          // GGUF general.name; "" when the file has none
  int n_layers = 0;
  int n_embd = 0;            // model width: the length of an embedding
  std::string embedding_pooling;  // "mean", "last" or "first" ({arch}.pooling_type; mean when absent)
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int vocab_size = 0;
  int context_length = 0;  // tokens per sequence (EngineOptions::ctx_size, or the model's trained context)
  uint64_t weight_bytes = 0;
  std::string chat_format;       // "chatml", "llama3", "mistral"; "" = no usable template: ChatPrompt fails
  std::string chat_unavailable;  // why there is no chat format; "" when there is one
  std::string device;            // "cpu" or "cuda"
  std::string kv;                // the KV configuration in one line (formats per class, tiers)
  double kv_bits_per_value = 0;
};

// One entry of the KV event log: a page stored, moved between tiers or evicted. Sequence numbers start at 1 and
// have no gaps.
struct KvEventRecord {
  uint64_t seq = 0;
  KvEventKind kind = KvEventKind::kStored;
  uint64_t page = 0;
  KvTier tier = KvTier::kHot;  // where the page is (stored, moved) or was (evicted)
  KvTier from = KvTier::kHot;  // moved: where it was
  std::string request_id;      // whose page ("" for pages the prefix cache holds alone)
  int layer = -1;
  int kv_head = -1;
  std::string format;  // "K" or "K/V"
  uint32_t bytes = 0;
  double unix_seconds = 0;
};

// How text becomes tokens. Prompts sent as plain text take parse_special = false: a "<|im_end|>" typed by a
// user stays text.
struct TokenizeOptions {
  bool add_special = true;     // BOS (and EOS) as the model's metadata says
  bool parse_special = false;  // control-token text becomes the control token
};

// A loaded LoRA adapter.
struct LoraInfo {
  std::string name;
  std::string path;
  float scale = 1.0f;
  int rank = 0;          // the largest rank of its matrices
  int matrices = 0;      // base matrices it changes
  uint64_t bytes = 0;    // its tensors
};

class EngineApi {
 public:
  virtual ~EngineApi() = default;

  virtual ModelInfo Info() const = 0;

  virtual std::vector<int32_t> Tokenize(std::string_view text, TokenizeOptions options) const = 0;
  // The text of `ids`; invalid_argument naming the first id outside [0, vocab_size).
  virtual StatusOr<std::string> Detokenize(std::span<const int32_t> ids) const = 0;
  // One token's piece as the vocabulary spells it (raw bytes; may be part of a UTF-8 sequence).
  virtual std::string TokenText(int32_t id) const = 0;
  // The prompt tokens of a conversation under the model's chat template, ending with the opening of the
  // assistant's turn. failed_precondition when the model has no usable template; invalid_argument for an
  // unknown role.
  // `tools` are described to the model in the chat format's way (engine/runner/tool_calls.h).
  virtual StatusOr<std::vector<int32_t>> ChatPrompt(const std::vector<ChatMessage>& messages,
                                                    const std::vector<ToolSpec>& tools = {}) const = 0;

  // Compiles a structured-output constraint for GenerateRequest::constraint (cached: a spec seen before returns
  // at once). invalid_argument naming the problem for a malformed spec or an unsupported JSON-schema keyword.
  virtual StatusOr<std::shared_ptr<const CompiledConstraint>> CompileConstraint(const ConstraintSpec& spec) const = 0;

  // Queues a request. Errors (nothing is queued): invalid_argument (empty prompt, prompt longer than the
  // context, bad sampling parameters, duplicate id), unavailable (draining), resource_exhausted (queue full).
  // On success the sink receives events until one with `final`.
  virtual Status Submit(GenerateRequest request, EventSink sink) = 0;
  // LoRA adapters (llama.cpp's GGUF format, engine/llm/lora.h): loads `path` under `name` (already_exists when the
  // name is taken; invalid_argument naming the problem for a file that does not fit the model), unloads one
  // (not_found; requests running under it finish first), lists them.
  virtual Status LoadLora(const std::string& name, const std::string& path, float scale) = 0;
  virtual Status UnloadLora(const std::string& name) = 0;
  virtual std::vector<LoraInfo> Loras() const = 0;
  // Cancels a waiting or running request; its final event has kAborted and its KV is freed within one step.
  // False when no live request has that id.
  virtual bool Abort(const std::string& id) = 0;
  // Stops admitting new requests (Submit() returns unavailable); running and waiting ones continue.
  virtual void StopAdmitting() = 0;
  // Ends every live request with kShutdown.
  virtual void CancelAll() = 0;

  virtual EngineStats Stats() const = 0;
  // [n_layers * n_kv_heads], layer-major, from the current layout (adaptation moves heads between steps).
  virtual std::vector<HeadPlacement> HeadPlacements() const = 0;
  // Up to `max` events after sequence number `after`, waiting up to `timeout_ms` for the first;
  // `first_available` gets the oldest sequence number still held (older ones were dropped).
  virtual std::vector<KvEventRecord> KvEventsSince(uint64_t after, size_t max, int timeout_ms,
                                                   uint64_t* first_available) const = 0;
  // The newest event's sequence number (0 before any).
  virtual uint64_t LastKvEvent() const = 0;
};

// Loads the model and tokenizer, opens the KV store and starts the engine thread (engine/runner/engine.h).
StatusOr<std::unique_ptr<EngineApi>> CreateEngine(const EngineOptions& options);

}  // namespace tq::engine
