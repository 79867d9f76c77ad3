#include "config/option_table.h"

#include <utility>

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
  return t;
}

}  // namespace tq::config
