// Options of the engine and its KV manager: plain values, filled from the configuration (server/engine_config.h)
// or by a tool, read once at Engine::Create. No behaviour here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tq::storage {
class IoQueue;
}  // namespace tq::storage

namespace tq::engine {

// KV formats per (layer, KV head). Without a preset: uniform K and V formats ("auto" = f16 where the page kernels
// support the head dimension, else f32). With a preset (engine/kv/precision.h) and a head profile: each head gets
// its precision class's formats; "uniform:FMT" puts every head in FMT. Either way the first and last
// `boundary_layers` layers stay f16.
struct KvSpec {
  std::string k_format = "auto";  // "auto", "f32" or a kernels/formats name
  std::string v_format = "auto";
  int boundary_layers = -1;      // first and last N layers f16; -1 = the preset's own (0 without a preset)
  std::string preset;             // "" | default | 5x | 6x | code | longdoc | chat | auto | shares | uniform:FMT
  std::string profile_path;       // head profile JSON (tqserve calibrate); needed by the ranked presets but default
  // Formats per precision class, "FMT" or "KFMT/VFMT"; "auto" = the preset's own (Preset::active_format, ...).
  std::string hot_format = "f16";
  std::string active_format = "auto";
  std::string sparse_format = "auto";
  // What the channel scale of compressed keys weighs (SequenceKv::FixTransform): "queries" (the queries Append is
  // given, where there are any) or "keys" (the keys alone).
  std::string key_scale = "queries";
};

// Tiers of the KV page store (engine/kv/page_store.h).
struct KvStoreOptions {
  uint64_t hot_bytes = uint64_t{2} << 30;   // budget of the hot tier; 0 = no hot tier
  uint64_t warm_bytes = uint64_t{2} << 30;  // budget of the warm tier; 0 = no warm tier
  bool warm_lock = false;                    // mlock the warm arena
  std::string cold_dir;                      // "" = no cold tier
  // The default cold directory (not one the user named): when it cannot be used (not writable, full, another
  // daemon's, a link), the store opens without a cold tier, says why once and reports it (cold_unavailable).
  bool cold_optional = false;
  uint64_t cold_bytes = uint64_t{16} << 30;  // budget of the cold tier on disk
  uint64_t cold_cache_bytes = uint64_t{128} << 20;  // RAM cache of cold pages
  std::string io_backend = "auto";           // "auto", "io_uring" or "pread"
  uint32_t io_depth = 64;                    // cold reads and writes in flight
  bool direct_io = true;                     // O_DIRECT where the file system allows
  // Fault injection (bench/chaos): every cold read and write completes this many microseconds late (the engine
  // wraps the cold tier's queue in a storage::FaultQueue with one kLatency rule); 0 = off.
  uint32_t io_latency_us = 0;
  // Identity of the model and KV layout: cold pages of an earlier run with the same fingerprint are kept at
  // start-up (TakeRecovered) for the prefix cache; others are erased.
  uint64_t fingerprint = 0;
  uint32_t head_dim = 256;  // at least the model's: sizes the record in front of cold pages (a V scale per channel)
  // Tests only: wraps the cold tier's I/O queue (e.g. a storage::FaultQueue around the real one).
  std::function<std::unique_ptr<storage::IoQueue>(std::unique_ptr<storage::IoQueue>)> wrap_queue;
};

// Online adaptation of precision classes (engine/kv/adaptation.h).
struct AdaptationOptions {
  int window = 100;  // steps
  int every = 100;   // steps between decisions
  int margin = 0;    // ranks; 0 = 10% of the movable heads
  int max_moves = 4;  // pairs per decision
};

// Everything Engine::Create takes.
// Called while the model file is read and checked at load: bytes done of the file's total, done == total last.
using LoadProgress = std::function<void(uint64_t done_bytes, uint64_t total_bytes)>;

// A LoRA adapter to load at start-up (`--lora name=path[:scale]`): requests choose it by name.
struct LoraSpec {
  std::string name;
  std::string path;
  float scale = 1.0f;
};

struct EngineOptions {
  std::string model_path;
  std::vector<LoraSpec> loras;
  LoadProgress load_progress;  // may be empty
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
  // Chat template: "auto" = recognised from the GGUF's tokenizer.chat_template (none recognised: chat prompts
  // fail with the reason), or "chatml", "llama3", "mistral".
  std::string chat_format = "auto";
  // Control-token text inside chat message content (e.g. "<|im_end|>") becomes control tokens. Off: content is
  // plain text and only the template's own markers are control tokens.
  bool chat_control_tokens = false;
};

}  // namespace tq::engine
