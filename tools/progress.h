// One progress line for long commands (eval, calibrate) on stderr: "\r<what> done/total (p%), elapsed s, ETA s".
// Printed only when stderr is a terminal, so output piped to a file or another program (--json, CI logs) stays
// machine-readable; TQ_TEST_FORCE_PROGRESS=1 prints it anyway (tests).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace tq::cli {

class ProgressLine {
 public:
  explicit ProgressLine(std::string what);
  // `done` of `total` units finished; `detail` (e.g. "ppl 23.41") follows the counts. The line ends with a newline
  // when done == total.
  void Update(int64_t done, int64_t total, std::string_view detail = {});

 private:
  std::string what_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tq::cli
