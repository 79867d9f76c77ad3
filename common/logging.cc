#include "common/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>

namespace tq {
namespace {

// One JSON object per line: {"ts": ISO-8601 UTC with milliseconds, "level", "logger", "msg"}.
class JsonLineFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    using namespace std::chrono;
    const auto since_epoch = msg.time.time_since_epoch();
    const std::time_t secs = duration_cast<seconds>(since_epoch).count();
    const int millis = static_cast<int>(duration_cast<milliseconds>(since_epoch).count() % 1000);
    std::tm utc{};
    gmtime_r(&secs, &utc);
    char ts[40];
    const size_t n = std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &utc);
    std::snprintf(ts + n, sizeof ts - n, ".%03dZ", millis);

    nlohmann::json line;
    line["ts"] = ts;
    const auto level = spdlog::level::to_string_view(msg.level);
    line["level"] = std::string_view(level.data(), level.size());
    line["msg"] = std::string_view(msg.payload.data(), msg.payload.size());
    const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    dest.append(text.data(), text.data() + text.size());
    dest.push_back('\n');
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonLineFormatter>();
  }
};

}  // namespace

StatusOr<LogFormat> ParseLogFormat(std::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return InvalidArgumentError("log format must be 'text' or 'json', not '" + std::string(name) + "'");
}

Status InitLogging(const LogOptions& options, std::shared_ptr<spdlog::sinks::sink> sink) {
  const auto level = spdlog::level::from_str(options.level);
  // from_str maps unknown names to off; accept "off" only when asked for.
  if (level == spdlog::level::off && options.level != "off") {
    return InvalidArgumentError("unknown log level '" + options.level +
                                "' (allowed: trace, debug, info, warn, error, critical, off)");
  }
  if (sink == nullptr) sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>("tqserve", sink);
  if (options.format == LogFormat::kJson) {
    logger->set_formatter(std::make_unique<JsonLineFormatter>());
  } else {
    logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %-5l %v");
  }
  logger->set_level(level);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(std::move(logger));
  return Status::Ok();
}

}  // namespace tq
