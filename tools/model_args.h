// Flags shared by the subcommands that load a model outside the daemon (generate, eval, calibrate, bench): bound
// from the daemon's option table (config/option_table.cc), so each has the same name, help, type and range as in
// `tqserve serve`, and read from the same sources (TQ_* environment, TQ_CONFIG file, flags). Where a tool's
// default differs from the daemon's it says so: tools keep one f16 KV format and no cold tier unless asked.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "config/config.h"
#include "engine/kv/kv_cache.h"
#include "engine/llm/model.h"
#include "engine/tokenizer/tokenizer.h"

namespace tq::cli {

// The option-table rows a subcommand takes as flags.
enum class ModelFlags {
  kModel,   // model.path (--model, -m), model.dir, engine.threads (--threads, -t)
  kKv,      // those, the KV formats (kv.k_format, kv.preset, ...) and the tiers (kv.hot_bytes, kv.cold_dir, ...)
  kEngine,  // every engine.* and kv.* option: a tool that runs the engine itself (generate)
};

// What the flags resolve to once parsed.
struct ModelArgs {
  std::string model;  // model.path; empty = the default model in model.dir
  int threads = 0;
  engine::KvSpec kv;
  engine::KvStoreOptions store;
  config::Config config;  // every option, as loaded
};

// Adds the rows `which` names to `app`; `defaults` (option name -> text) are this tool's own defaults on top of
// the tools' (kv.preset "", kv.cold_dir ""). `args` is filled when `app` has been parsed; a bad value is a
// usage error naming the option.
void AddModelFlags(CLI::App* app, ModelArgs* args, ModelFlags which = ModelFlags::kKv,
                   std::vector<std::pair<std::string, std::string>> defaults = {});

// The model path to load: --model, or the default model in model.dir.
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
