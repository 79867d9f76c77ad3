// The effective configuration: plain structs, filled by the loader from the option table (option_table.cc) and
// handed down to the server and engine. Nothing below server/ reads files, flags or the environment itself.
#pragma once

#include <cstdint>
#include <string>

namespace tq::config {

struct LogConfig {
  std::string level = "info";  // trace | debug | info | warn | error | critical | off
  std::string format = "text";  // text | json
};

struct ModelConfig {
  std::string path;  // GGUF file; empty = the default model in `dir`
  std::string dir;   // cache directory of fetched models (default ~/.cache/tqserve/models)
  std::string lora;  // LoRA adapters loaded at start-up: "name=path[:scale]", comma-separated
};

struct EngineConfig {
  int threads = 0;             // worker threads for the forward pass; 0 = all cores
  int ctx_size = 0;            // tokens per sequence; 0 = the model's trained context
  int max_batch_tokens = 512;  // token budget of one engine step (decodes + prefill chunks)
  int max_running = 32;        // sequences decoding at once
  int max_waiting = 1024;      // queued requests beyond which new ones get 429
  std::string device = "cpu";  // cpu | cuda (weights and KV in GPU memory; see docs/gpu.md)
};

struct ServerConfig {
  std::string host = "0.0.0.0";
  int http_port = 8080;
  int grpc_port = 50051;        // 0 disables the gRPC front end
  double drain_timeout_s = 30;  // SIGTERM: how long in-flight requests may finish
  double idle_timeout_s = 60;   // HTTP: longest wait for a client's next bytes before the connection is closed
  int max_connections = 1024;   // HTTP connections at once; more are answered 503 and closed; 0 = no limit
  double read_timeout_s = 30;   // HTTP: a request (header and body) must arrive whole within this from its start
  double send_timeout_s = 30;   // HTTP: a client that takes none of our bytes for this long is disconnected
  std::string model_id;         // the name clients use; empty = general.name of the GGUF, or its file name
  std::string chat_format = "auto";  // auto (from the GGUF's template) | chatml | llama3 | mistral
  bool chat_control_tokens = false;  // control-token text in chat message content becomes control tokens
  std::string api_keys;         // comma-separated; empty (and no api_key_file) = no authentication
  std::string api_key_file;     // one key per line ("admin KEY" for an admin key); re-read on SIGHUP
  std::string admin_api_keys;   // comma-separated keys that see and may act on every tenant's requests
  std::string tls_cert_file;    // PEM certificate chain; with tls_key_file: both front ends serve TLS only
  std::string tls_key_file;     // PEM private key of that certificate; both set or neither
  bool web_ui = true;           // GET / serves the built-in page (chat and the KV cache map)
  bool ignore_unknown_fields = false;  // request fields the API does not know are ignored instead of a 400
  int responses_max_count = 1000;       // /v1/responses kept for previous_response_id; 0 = none stored
  int64_t responses_max_bytes = 64 << 20;
  double responses_ttl_s = 3600;        // a stored response is dropped this long after it was stored
};

struct LimitsConfig {
  int64_t max_body_bytes = 4 << 20;
  int max_prompt_tokens = 0;         // 0 = the context length minus one
  int max_tokens = 0;                // cap on a request's max_tokens; 0 = the context
  int default_max_tokens = 256;      // when a request does not say
  int max_concurrent_requests = 0;   // generation requests at once; 0 = unlimited
  double request_timeout_s = 0;      // seconds from arrival until a generation is aborted; 0 = no limit
  int64_t max_schema_bytes = 64 << 10;  // structured output: longest JSON schema, regex or grammar text
  int max_schema_depth = 32;            // structured output: deepest nesting of a JSON schema
  int max_logit_bias = 300;             // entries of logit_bias per request
  int max_embedding_inputs = 64;        // inputs of one /v1/embeddings request
};

struct KvConfig {
  std::string k_format = "auto";  // auto (f16, or f32 where pages do not fit the head size) | f32 | a format name
  std::string v_format = "auto";
  int boundary_layers = -1;       // first and last N layers kept at f16; -1 = the preset's own
  std::string preset = "default";  // default | 5x | 6x | code | longdoc | chat | auto | shares | uniform:FMT | "" (k/v formats)
  std::string profile;            // head profile JSON from `tqserve calibrate`
  std::string hot_format = "f16";
  std::string active_format = "auto";  // auto = the preset's own (engine/kv/precision.h)
  std::string sparse_format = "auto";
  std::string key_scale = "queries";   // queries | keys: what the channel scale of compressed keys weighs
  // Tiers (engine/kv/page_store.h): budgets in bytes; the cold tier exists when cold_dir is set.
  int64_t hot_bytes = int64_t{2} << 30;
  int64_t warm_bytes = int64_t{2} << 30;
  bool warm_lock = false;
  // "auto" (the default) = <$HOME>/.cache/tqserve/kv, resolved by the loader, which then sets cold_dir_optional:
  // a default directory that cannot be used leaves the cold tier off with a warning. "" = no cold tier; any other
  // path must work or start-up fails.
  std::string cold_dir = "auto";
  bool cold_dir_optional = false;  // not an option: set by Loader::Finish for "auto"
  int64_t cold_bytes = int64_t{16} << 30;
  int64_t cold_cache_bytes = int64_t{128} << 20;
  std::string io_backend = "auto";  // auto | io_uring | pread
  int io_depth = 64;
  bool direct_io = true;
  // Fault injection (the chaos bench, bench/chaos): every cold read and write completes this much later; 0 = off.
  int io_latency_us = 0;
  int64_t prefix_cache_bytes = int64_t{1} << 30;  // 0 = no prefix cache
  double prefix_pin_s = 0;
  // device cuda: fractions of the (layer, KV head) pairs whose pages live in pinned RAM (warm) and in
  // cold_dir (cold, read per layer); the rest live in GPU memory
  double gpu_warm_fraction = 0;
  double gpu_cold_fraction = 0;
  bool adapt = false;       // online adaptation of precision classes
  int adapt_window = 100;   // steps
  int adapt_every = 100;    // steps between decisions
};

struct Config {
  LogConfig log;
  ModelConfig model;
  EngineConfig engine;
  ServerConfig server;
  LimitsConfig limits;
  KvConfig kv;
};

}  // namespace tq::config
