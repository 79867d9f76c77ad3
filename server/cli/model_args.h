// Flags shared by the subcommands that load a model outside the daemon (generate, eval): the model path
// (default: the default model in model.dir, from the same config sources as serve) and the KV formats.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "common/status.h"
#include "engine/llm/kv_cache.h"

namespace tq::cli {

struct ModelArgs {
  std::string model;  // empty: the default model
  int threads = 0;
  engine::KvSpec kv;
};

// Adds --model, --threads, --kv-k, --kv-v, --kv-boundary-layers.
void AddModelFlags(CLI::App* app, ModelArgs* args);

// The model path to load: --model, or the default model in model.dir (TQ_MODEL_DIR, config defaults).
StatusOr<std::string> ResolveModelPath(const ModelArgs& args);

// Peak resident set size of this process in bytes (VmHWM), 0 where unknown.
uint64_t PeakRssBytes();

}  // namespace tq::cli
