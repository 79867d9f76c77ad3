#include "server/engine_config.h"

#include <cstdlib>
#include <filesystem>
#include <utility>

namespace tq::server {

StatusOr<std::string> ResolveModelPath(const config::Config& cfg) {
  std::string path = cfg.model.path;
  if (path.empty()) path = cfg.model.dir + "/" + kDefaultModelFile;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return NotFoundError("model file " + path + " does not exist" +
                         (cfg.model.path.empty() ? " (fetch the default model with scripts/fetch-model.sh)" : ""));
  }
  return path;
}

StatusOr<std::vector<engine::LoraSpec>> ParseLoraList(std::string_view text) {
  std::vector<engine::LoraSpec> out;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view entry = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (entry.empty()) continue;
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == entry.size()) {
      return InvalidArgumentError("model.lora entry '" + std::string(entry) + "': expected name=path[:scale]");
    }
    engine::LoraSpec spec{std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)), 1.0f};
    // A trailing ":number" is the scale (a path may hold colons; the last one with a number after it counts).
    const size_t colon = spec.path.rfind(':');
    if (colon != std::string::npos) {
      const std::string number = spec.path.substr(colon + 1);
      char* end = nullptr;
      const float scale = std::strtof(number.c_str(), &end);
      if (!number.empty() && end == number.c_str() + number.size()) {
        spec.scale = scale;
        spec.path.resize(colon);
      }
    }
    for (const engine::LoraSpec& s : out) {
      if (s.name == spec.name) return InvalidArgumentError("model.lora names '" + spec.name + "' twice");
    }
    out.push_back(std::move(spec));
  }
  return out;
}

StatusOr<engine::EngineOptions> ToEngineOptions(const config::Config& cfg, std::string model_path) {
  engine::EngineOptions eo;
  eo.model_path = std::move(model_path);
  TQ_ASSIGN_OR_RETURN(eo.loras, ParseLoraList(cfg.model.lora));
  eo.threads = cfg.engine.threads;
  eo.ctx_size = cfg.engine.ctx_size;
  eo.max_batch_tokens = cfg.engine.max_batch_tokens;
  eo.max_running = cfg.engine.max_running;
  eo.max_waiting = cfg.engine.max_waiting;
  eo.device = cfg.engine.device;
  eo.chat_format = cfg.server.chat_format;
  eo.chat_control_tokens = cfg.server.chat_control_tokens;
  eo.gpu_warm_fraction = cfg.kv.gpu_warm_fraction;
  eo.gpu_cold_fraction = cfg.kv.gpu_cold_fraction;
  eo.kv.k_format = cfg.kv.k_format;
  eo.kv.v_format = cfg.kv.v_format;
  eo.kv.boundary_layers = cfg.kv.boundary_layers;
  eo.kv.preset = cfg.kv.preset;
  eo.kv.profile_path = cfg.kv.profile;
  eo.kv.hot_format = cfg.kv.hot_format;
  eo.kv.active_format = cfg.kv.active_format;
  eo.kv.sparse_format = cfg.kv.sparse_format;
  eo.kv.key_scale = cfg.kv.key_scale;
  eo.kv_store.hot_bytes = static_cast<uint64_t>(cfg.kv.hot_bytes);
  eo.kv_store.warm_bytes = static_cast<uint64_t>(cfg.kv.warm_bytes);
  eo.kv_store.warm_lock = cfg.kv.warm_lock;
  eo.kv_store.cold_dir = cfg.kv.cold_dir;
  eo.kv_store.cold_optional = cfg.kv.cold_dir_optional;
  eo.kv_store.cold_bytes = static_cast<uint64_t>(cfg.kv.cold_bytes);
  eo.kv_store.cold_cache_bytes = static_cast<uint64_t>(cfg.kv.cold_cache_bytes);
  eo.kv_store.io_backend = cfg.kv.io_backend;
  eo.kv_store.io_depth = static_cast<uint32_t>(cfg.kv.io_depth);
  eo.kv_store.direct_io = cfg.kv.direct_io;
  eo.kv_store.io_latency_us = static_cast<uint32_t>(cfg.kv.io_latency_us);
  eo.prefix_cache_bytes = static_cast<uint64_t>(cfg.kv.prefix_cache_bytes);
  eo.prefix_pin_seconds = cfg.kv.prefix_pin_s;
  eo.kv_adapt = cfg.kv.adapt;
  eo.adapt.window = cfg.kv.adapt_window;
  eo.adapt.every = cfg.kv.adapt_every;
  return eo;
}

}  // namespace tq::server
