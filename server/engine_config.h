// The configuration (config/config.h) as engine options: the one place a Config becomes EngineOptions, for the
// daemon and for every subcommand that loads a model (tools/).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "config/config.h"
#include "engine/api.h"

namespace tq::server {

// The default model's file name in model.dir (scripts/fetch-model.sh fetches it).
inline constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

// model.path, or the default model in model.dir; not_found (saying how to fetch the default) when it is missing.
StatusOr<std::string> ResolveModelPath(const config::Config& config);

// Every engine and KV option of `config`; model_path from ResolveModelPath. invalid_argument for a malformed
// model.lora list.
StatusOr<engine::EngineOptions> ToEngineOptions(const config::Config& config, std::string model_path);

// model.lora: "name=path[:scale]" entries separated by commas; scale defaults to 1. Names are unique.
StatusOr<std::vector<engine::LoraSpec>> ParseLoraList(std::string_view text);

}  // namespace tq::server
