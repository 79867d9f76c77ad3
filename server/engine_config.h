// The configuration (config/config.h) as engine options: the one place a Config becomes EngineOptions, for the
// daemon and for every subcommand that loads a model (tools/).
#pragma once

#include <string>

#include "common/status.h"
#include "config/config.h"
#include "engine/api.h"

namespace tq::server {

// The default model's file name in model.dir (scripts/fetch-model.sh fetches it).
inline constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

// model.path, or the default model in model.dir; not_found (saying how to fetch the default) when it is missing.
StatusOr<std::string> ResolveModelPath(const config::Config& config);

// Every engine and KV option of `config`; model_path from ResolveModelPath.
engine::EngineOptions ToEngineOptions(const config::Config& config, std::string model_path);

}  // namespace tq::server
