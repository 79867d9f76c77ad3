#include "common/logging.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace tq {
namespace {

TEST(LoggingTest, RejectsUnknownLevel) {
  Status s = InitLogging({.level = "verbose", .format = LogFormat::kText});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("verbose"), std::string::npos);
  EXPECT_TRUE(InitLogging({.level = "off", .format = LogFormat::kText}).ok());
}

TEST(LoggingTest, ParsesFormats) {
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_EQ(*ParseLogFormat("text"), LogFormat::kText);
  EXPECT_FALSE(ParseLogFormat("xml").ok());
}

TEST(LoggingTest, JsonLinesAreValidJsonWithEscapedMessage) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  ASSERT_TRUE(InitLogging({.level = "debug", .format = LogFormat::kJson}, sink).ok());
  spdlog::debug("quote \" backslash \\ newline \n tab \t done");
  spdlog::trace("below the level: not written");
  spdlog::default_logger()->flush();

  std::istringstream lines(out.str());
  std::string line;
  ASSERT_TRUE(std::getline(lines, line));
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j.at("level"), "debug");
  EXPECT_EQ(j.at("msg"), "quote \" backslash \\ newline \n tab \t done");
  EXPECT_EQ(j.at("ts").get<std::string>().size(), 24u);  // 2026-11-29T17:20:01.123Z
  EXPECT_FALSE(std::getline(lines, line)) << "trace line leaked: " << line;
}

TEST(LoggingTest, TextLinesHaveLevelAndMessage) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  ASSERT_TRUE(InitLogging({.level = "warn", .format = LogFormat::kText}, sink).ok());
  spdlog::info("hidden");
  spdlog::warn("disk {} is full", "/mnt/cold");
  spdlog::default_logger()->flush();
  EXPECT_EQ(out.str().find("hidden"), std::string::npos);
  EXPECT_NE(out.str().find("warning disk /mnt/cold is full"), std::string::npos) << out.str();
}

}  // namespace
}  // namespace tq
