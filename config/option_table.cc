#include "config/option_table.h"

#include <string>
#include <utility>
#include <vector>

#include "common/kv_format_table.h"

namespace tq::config {
namespace {

void Add(std::vector<Option>* table, std::string name, std::string flag, std::string help,
         std::unique_ptr<Field> field) {
  Option option;
  option.env = EnvName(name);
  option.name = std::move(name);
  option.flag = std::move(flag);
  option.help = std::move(help);
  option.field = std::move(field);
  table->push_back(std::move(option));
}

}  // namespace

std::vector<Option> BuildOptionTable(Config* c) {
  std::vector<Option> t;
  // Logging.
  Add(&t, "log.level", "log-level", "Log level",
      EnumField(&c->log.level, "info", {"trace", "debug", "info", "warn", "error", "critical", "off"}));
  Add(&t, "log.format", "log-format", "Log line format: human-readable text or one JSON object per line",
      EnumField(&c->log.format, "text", {"text", "json"}));

  // Model.
  Add(&t, "model.path", "model", "GGUF model file; empty = the default model (SmolLM2-135M-Instruct) in model.dir",
      StringField(&c->model.path, ""));
  Add(&t, "model.dir", "model-dir", "Directory of fetched models (scripts/fetch-model.sh stores them here)",
      StringField(&c->model.dir, "~/.cache/tqserve/models"));
  Add(&t, "model.lora", "lora",
      "LoRA adapters (llama.cpp's GGUF format) loaded at start-up, name=path[:scale] separated by commas; a request "
      "picks one with \"model\": \"MODEL:name\" (HTTP) or lora (gRPC); POST/DELETE /v1/admin/lora at run time",
      StringField(&c->model.lora, ""));

  // Engine.
  Add(&t, "engine.threads", "threads", "Threads for the forward pass; 0 = one per core",
      IntField(&c->engine.threads, 0, 0, 1024));
  Add(&t, "engine.ctx_size", "ctx-size", "Context length per sequence in tokens; 0 = the model's trained context",
      IntField(&c->engine.ctx_size, 0, 0, 1 << 20));
  Add(&t, "engine.max_batch_tokens", "max-batch-tokens",
      "Token budget of one engine step: running decodes plus chunks of waiting prefills",
      IntField(&c->engine.max_batch_tokens, 512, 16, 1 << 16));
  Add(&t, "engine.max_running", "max-running", "Most sequences decoding at once",
      IntField(&c->engine.max_running, 32, 1, 4096));
  Add(&t, "engine.max_waiting", "max-waiting", "Most requests queued for admission; beyond it requests get 429",
      IntField(&c->engine.max_waiting, 1024, 1, 1 << 20));
  Add(&t, "engine.device", "device",
      "Where the forward pass runs: cpu, or cuda (weights and KV in GPU memory; one K and one V format for "
      "every "
      "head, kv.hot_bytes sizes the device pool; needs a build with CUDA and a GPU)",
      EnumField(&c->engine.device, "cpu", {"cpu", "cuda"}));

  // Front ends.
  Add(&t, "server.host", "host", "Address the HTTP and gRPC front ends listen on",
      StringField(&c->server.host, "0.0.0.0"));
  Add(&t, "server.http_port", "http-port", "HTTP (OpenAI-compatible) port",
      IntField(&c->server.http_port, 8080, 1, 65535));
  Add(&t, "server.grpc_port", "grpc-port", "gRPC port; 0 disables the gRPC front end",
      IntField(&c->server.grpc_port, 50051, 0, 65535));
  Add(&t, "server.drain_timeout_s", "drain-timeout",
      "Seconds in-flight requests may run after SIGTERM before they are cancelled",
      DoubleField(&c->server.drain_timeout_s, 30.0, 0.0, 3600.0));
  Add(&t, "server.idle_timeout_s", "idle-timeout",
      "Seconds an HTTP connection may wait for the client's next bytes (TLS handshake, next request, the rest "
      "of one) before it is closed",
      DoubleField(&c->server.idle_timeout_s, 60.0, 0.1, 3600.0));
  Add(&t, "server.read_timeout_s", "read-timeout",
      "Seconds a request (header and body) may take to arrive once it has started, however slowly it trickles; "
      "past it the connection is closed",
      DoubleField(&c->server.read_timeout_s, 30.0, 0.1, 3600.0));
  Add(&t, "server.send_timeout_s", "send-timeout",
      "Seconds a client may take none of the bytes the server sends (a stalled reader); past it the connection "
      "is closed and its request aborted, its KV freed",
      DoubleField(&c->server.send_timeout_s, 30.0, 0.1, 3600.0));
  Add(&t, "server.max_connections", "max-connections",
      "HTTP connections served at once (a thread each), and gRPC calls in flight; one more connection is answered "
      "503 and closed at once, one more call gets RESOURCE_EXHAUSTED; 0 = no limit (each costs a thread)",
      IntField(&c->server.max_connections, 1024, 0, 1 << 20));
  Add(&t, "server.model_id", "model-id",
      "Model name clients send and /v1/models lists; empty = the GGUF's general.name or file name",
      StringField(&c->server.model_id, ""));
  Add(&t, "server.chat_format", "chat-format",
      "Chat template: auto = recognised from the GGUF's tokenizer.chat_template",
      EnumField(&c->server.chat_format, "auto", {"auto", "chatml", "llama3", "mistral"}));
  Add(&t, "server.chat_control_tokens", "chat-control-tokens",
      "Control-token text inside chat messages (e.g. <|im_end|>) becomes control tokens; off, message content is "
      "plain text and only the chat template's own markers are control tokens (on only for trusted callers)",
      BoolField(&c->server.chat_control_tokens, false));
  Add(&t, "server.api_keys", "api-keys",
      "Comma-separated API keys (HTTP Authorization: Bearer KEY, gRPC metadata authorization); empty and no "
      "server.api_key_file = no auth. Visible in `ps`: prefer server.api_key_file",
      StringField(&c->server.api_keys, ""));
  t.back().secret = true;
  Add(&t, "server.api_key_file", "api-key-file",
      "File of API keys, one per line (blank lines and # comments ignored; \"admin KEY\" marks an admin key), read at "
      "start and again on SIGHUP; adds to server.api_keys",
      StringField(&c->server.api_key_file, ""));
  Add(&t, "server.admin_api_keys", "admin-api-keys",
      "Comma-separated API keys that may act on every tenant (abort any request, see every KV event and stored "
      "response); each other key is a tenant of its own: its prefix-cache pages, stored responses, aborts and KV "
      "events are its own",
      StringField(&c->server.admin_api_keys, ""));
  t.back().secret = true;
  Add(&t, "server.tls_cert_file", "tls-cert-file",
      "PEM certificate (chain) file; with server.tls_key_file, HTTP and gRPC serve TLS only; empty = plain",
      StringField(&c->server.tls_cert_file, ""));
  Add(&t, "server.tls_key_file", "tls-key-file", "PEM private key file of server.tls_cert_file",
      StringField(&c->server.tls_key_file, ""));
  Add(&t, "server.web_ui", "web-ui",
      "Serve the built-in page at / (a chat, and the KV cache's classes and tiers per head from /kv/state; the "
      "data needs the API key when keys are set)",
      BoolField(&c->server.web_ui, true));
  Add(&t, "server.responses_max_count", "responses-max-count",
      "Responses of /v1/responses kept (store: true) for previous_response_id and GET /v1/responses/{id}; the least "
      "recently used go first; 0 = none kept",
      IntField(&c->server.responses_max_count, 1000, 0, 1 << 24));
  Add(&t, "server.responses_max_bytes", "responses-max-bytes", "Memory the kept responses may take",
      BytesField(&c->server.responses_max_bytes, 64 << 20, 0, int64_t{64} << 30));
  Add(&t, "server.responses_ttl_s", "responses-ttl", "Seconds a kept response lives after it was stored",
      DoubleField(&c->server.responses_ttl_s, 3600.0, 1.0, 30.0 * 86400));
  Add(&t, "server.ignore_unknown_fields", "ignore-unknown-fields",
      "Accept and ignore request fields the API does not know (for lenient clients); off = a 400 naming the field. "
      "Known fields this server does not support are refused either way",
      BoolField(&c->server.ignore_unknown_fields, false));

  // Limits on what one request may ask for.
  Add(&t, "limits.max_body_bytes", "max-body-bytes", "Largest HTTP request body; larger bodies get 413",
      BytesField(&c->limits.max_body_bytes, 4 << 20, 1024, int64_t{1} << 30));
  Add(&t, "limits.max_prompt_tokens", "max-prompt-tokens", "Longest prompt in tokens; 0 = the context minus one",
      IntField(&c->limits.max_prompt_tokens, 0, 0, 1 << 24));
  Add(&t, "limits.max_tokens", "max-tokens-limit", "Largest max_tokens a request may ask for; 0 = no cap",
      IntField(&c->limits.max_tokens, 0, 0, 1 << 24));
  Add(&t, "limits.default_max_tokens", "default-max-tokens", "max_tokens of a request that does not set it",
      IntField(&c->limits.default_max_tokens, 256, 1, 1 << 24));
  Add(&t, "limits.max_concurrent_requests", "max-concurrent-requests",
      "Generation requests served at once; more get 429; 0 = unlimited",
      IntField(&c->limits.max_concurrent_requests, 0, 0, 1 << 20));
  Add(&t, "limits.request_timeout_s", "request-timeout",
      "Seconds a generation request may take from arrival (queue included); past it the request is aborted "
      "(HTTP 504 or finish_reason timeout, gRPC DEADLINE_EXCEEDED); 0 = no limit",
      DoubleField(&c->limits.request_timeout_s, 0.0, 0.0, 86400.0));
  Add(&t, "limits.max_schema_bytes", "max-schema-bytes",
      "Structured output: longest JSON schema, regular expression or grammar a request may send; longer is a 400",
      BytesField(&c->limits.max_schema_bytes, 64 << 10, 64, int64_t{16} << 20));
  Add(&t, "limits.max_schema_depth", "max-schema-depth",
      "Structured output: deepest nesting of subschemas in a JSON schema; deeper is a 400",
      IntField(&c->limits.max_schema_depth, 32, 1, 1024));
  Add(&t, "limits.max_embedding_inputs", "max-embedding-inputs",
      "Inputs one /v1/embeddings request (or gRPC Embed call) may hold; more is a 400",
      IntField(&c->limits.max_embedding_inputs, 64, 1, 4096));
  Add(&t, "limits.max_logit_bias", "max-logit-bias", "Entries a request's logit_bias may have; more is a 400",
      IntField(&c->limits.max_logit_bias, 300, 0, 1 << 20));

  // KV cache.
  // auto, then every row of the format table.
  std::vector<std::string> formats = {"auto"};
  for (const FormatInfo& f : kFormatTable) formats.emplace_back(f.name);
  Add(&t, "kv.k_format", "kv-k", "Key format (`tqserve formats` lists them); auto = f16",
      EnumField(&c->kv.k_format, "auto", formats));
  Add(&t, "kv.v_format", "kv-v", "Value format; auto = f16", EnumField(&c->kv.v_format, "auto", formats));
  Add(&t, "kv.boundary_layers", "kv-boundary-layers",
      "Keep the first and last N layers' KV at f16; -1 = the preset's own (default: 2; the others and no "
      "preset: 0); any other value overrides the preset's",
      IntField(&c->kv.boundary_layers, -1, -1, 512));
  Add(&t, "kv.preset", "kv-preset",
      "Precision classes per head: default (no profile needed; docs/kv.md), 5x and 6x (compact formats within "
      "3.2 and 2.7 bits per value, chosen by head_dim; no profile needed), code 15:70:15, longdoc 10:60:30, chat 20:65:15, "
      "auto (P90/P40), HOT:ACTIVE:SPARSE, uniform:FMT (uniform:f16 = uncompressed); empty = "
      "kv.k_format/kv.v_format everywhere",
      StringField(&c->kv.preset, "default"));
  Add(&t, "kv.key_scale", "kv-key-scale",
      "Channel scale of compressed keys: queries (weighs where the model's queries look; docs/kv.md) or keys "
      "(the keys alone, the rule before issue 38)",
      EnumField(&c->kv.key_scale, "queries", {"queries", "keys"}));
  Add(&t, "kv.profile", "kv-profile", "Head-importance profile JSON (`tqserve calibrate`) for the ranked presets",
      StringField(&c->kv.profile, ""));
  Add(&t, "kv.hot_format", "kv-hot", "Format of HOT heads: FMT or KFMT/VFMT", StringField(&c->kv.hot_format, "f16"));
  Add(&t, "kv.active_format", "kv-active",
      "Format of ACTIVE heads: FMT or KFMT/VFMT; auto = the preset's (default: int8/tq4; 5x: tq3.5c/tq3c at "
      "head_dim 256, else tq3c; 6x: tq3c/tq2.5c at head_dim 256, else tq3c/tq2c; the others: int8)",
      StringField(&c->kv.active_format, "auto"));
  Add(&t, "kv.sparse_format", "kv-sparse", "Format of SPARSE heads: FMT or KFMT/VFMT; auto = the preset's (5x and 6x: as ACTIVE; the others: tq4)",
      StringField(&c->kv.sparse_format, "auto"));
  Add(&t, "kv.hot_bytes", "kv-hot-bytes",
      "Budget of the hot tier (RAM; HBM with a GPU) for full KV pages: HOT heads, and others' overflow; 0 = none",
      BytesField(&c->kv.hot_bytes, int64_t{2} << 30, 0, int64_t{1} << 50));
  Add(&t, "kv.warm_bytes", "kv-warm-bytes", "Budget of the warm tier (host RAM) for ACTIVE heads' pages; 0 = none",
      BytesField(&c->kv.warm_bytes, int64_t{2} << 30, 0, int64_t{1} << 50));
  Add(&t, "kv.gpu_warm_fraction", "kv-gpu-warm-fraction",
      "With --device cuda: fraction of the (layer, KV head) pairs whose pages live in pinned host memory and "
      "are "
      "copied to the GPU a layer ahead of attention; the rest live in the device pool",
      DoubleField(&c->kv.gpu_warm_fraction, 0.0, 0.0, 1.0));
  Add(&t, "kv.gpu_cold_fraction", "kv-gpu-cold-fraction",
      "With --device cuda: fraction of the (layer, KV head) pairs whose pages live on disk in kv.cold_dir, "
      "read "
      "into pinned memory a layer ahead of attention (a pair both fractions pick is cold)",
      DoubleField(&c->kv.gpu_cold_fraction, 0.0, 0.0, 1.0));
  Add(&t, "kv.warm_lock", "kv-warm-lock", "mlock the warm tier (needs RLIMIT_MEMLOCK; runs unlocked if refused)",
      BoolField(&c->kv.warm_lock, false));
  Add(&t, "kv.cold_dir", "kv-cold-dir",
      "Directory of the cold tier's files (NVMe) for SPARSE heads' pages and the prefix cache across restarts; "
      "auto = ~/.cache/tqserve/kv where it can be used (else RAM, with a warning); '' = no cold tier",
      StringField(&c->kv.cold_dir, "auto"));
  Add(&t, "kv.cold_bytes", "kv-cold-bytes", "Budget of the cold tier on disk",
      BytesField(&c->kv.cold_bytes, int64_t{16} << 30, int64_t{1} << 20, int64_t{1} << 50));
  Add(&t, "kv.cold_cache_bytes", "kv-cold-cache-bytes",
      "RAM cache of cold pages that prefetch reads into and attention reads from",
      BytesField(&c->kv.cold_cache_bytes, int64_t{128} << 20, int64_t{1} << 20, int64_t{1} << 50));
  Add(&t, "kv.io_backend", "kv-io-backend",
      "Cold tier I/O: io_uring, pread (a thread pool; works where seccomp denies io_uring) or auto (io_uring, "
      "else pread)",
      EnumField(&c->kv.io_backend, "auto", {"auto", "io_uring", "pread"}));
  Add(&t, "kv.io_depth", "kv-io-depth", "Cold tier reads and writes in flight at once",
      IntField(&c->kv.io_depth, 64, 1, 4096));
  Add(&t, "kv.direct_io", "kv-direct-io", "O_DIRECT for the cold files where the file system allows it",
      BoolField(&c->kv.direct_io, true));
  Add(&t, "kv.io_latency_us", "kv-io-latency-us",
      "Testing only (fault injection for bench/chaos): every cold tier read and write completes this many "
      "microseconds late, as on a slow disk; 0 = off",
      IntField(&c->kv.io_latency_us, 0, 0, 10000000));
  Add(&t, "kv.prefix_cache_bytes", "kv-prefix-cache-bytes",
      "Pages kept for reuse by requests with the same prefix (in the tiers; on disk across restarts when there is "
      "a cold tier); 0 = off",
      BytesField(&c->kv.prefix_cache_bytes, int64_t{1} << 30, 0, int64_t{1} << 50));
  Add(&t, "kv.prefix_pin_s", "kv-prefix-pin",
      "Seconds a cached prefix stays pinned (not evicted) after its last use",
      DoubleField(&c->kv.prefix_pin_s, 0.0, 0.0, 1e7));
  Add(&t, "kv.adapt", "kv-adapt",
      "Move heads between ACTIVE and SPARSE as their attention changes (ranked presets; docs/kv.md)",
      BoolField(&c->kv.adapt, false));
  Add(&t, "kv.adapt_window", "kv-adapt-window", "Engine steps of attention statistics online adaptation ranks by",
      IntField(&c->kv.adapt_window, 100, 1, 1 << 20));
  Add(&t, "kv.adapt_every", "kv-adapt-every", "Engine steps between online adaptation decisions",
      IntField(&c->kv.adapt_every, 100, 1, 1 << 20));
  return t;
}

}  // namespace tq::config
