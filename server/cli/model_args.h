// Flags shared by the subcommands that load a model outside the daemon (generate, eval): the model path
// (default: the default model in model.dir, from the same config sources as serve) and the KV formats.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "common/status.h"
#include "engine/llm/kv_cache.h"
#include "engine/llm/model.h"
#include "engine/tokenizer/tokenizer.h"

namespace tq::cli {

struct ModelArgs {
  std::string model;  // empty: the default model
  int threads = 0;
  engine::KvSpec kv;
  engine::KvStoreOptions store;
};

// Adds --model, --threads, the KV format flags (--kv-k, --kv-v, --kv-boundary-layers, --kv-preset, ...) and the
// tier flags (--kv-hot-bytes, --kv-warm-bytes, --kv-cold-dir, --kv-cold-bytes, --kv-cold-cache-bytes,
// --kv-io-backend, --kv-io-depth), named as the daemon's options.
void AddModelFlags(CLI::App* app, ModelArgs* args);

// The model path to load: --model, or the default model in model.dir (TQ_MODEL_DIR, config defaults).
StatusOr<std::string> ResolveModelPath(const ModelArgs& args);

// A model with its tokenizer and the text of a file, loaded for an offline tool (eval, calibrate).
struct LoadedInputs {
  std::string model_path;
  std::unique_ptr<engine::Model> model;
  std::unique_ptr<engine::Tokenizer> tokenizer;
  std::string text;
};

// Resolves and opens the model, builds its tokenizer, and reads `text_file` whole.
StatusOr<LoadedInputs> LoadModelAndText(const ModelArgs& args, const std::string& text_file);

// Peak resident set size of this process in bytes (VmHWM), 0 where unknown.
uint64_t PeakRssBytes();

}  // namespace tq::cli
