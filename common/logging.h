// Logging: set up once at start-up, then used through spdlog's free functions (spdlog::info, ...).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace spdlog::sinks {
class sink;
}

namespace tq {

enum class LogFormat { kText, kJson };

struct LogOptions {
  std::string level = "info";  // trace, debug, info, warn, error, critical, off
  LogFormat format = LogFormat::kText;
};

// Installs the default logger: stderr, text ("2026-11-29 17:20:01.123 info  message") or JSON lines
// ({"ts":"...","level":"info","msg":"..."}). Returns invalid_argument for an unknown level.
// `sink` replaces stderr (tests capture output this way).
Status InitLogging(const LogOptions& options, std::shared_ptr<spdlog::sinks::sink> sink = nullptr);

// Parses "text" or "json".
StatusOr<LogFormat> ParseLogFormat(std::string_view name);

}  // namespace tq
