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
};

struct EngineConfig {
  int threads = 0;             // worker threads for the forward pass; 0 = all cores
  int ctx_size = 0;            // tokens per sequence; 0 = the model's trained context
  int max_batch_tokens = 512;  // token budget of one engine step (decodes + prefill chunks)
  int max_running = 32;        // sequences decoding at once
};

struct ServerConfig {
  std::string host = "0.0.0.0";
  int http_port = 8080;
  int grpc_port = 50051;        // 0 disables the gRPC front end
  double drain_timeout_s = 30;  // SIGTERM: how long in-flight requests may finish
};

struct Config {
  LogConfig log;
  ModelConfig model;
  EngineConfig engine;
  ServerConfig server;
};

}  // namespace tq::config
