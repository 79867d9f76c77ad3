// One progress line for long work (model load, eval, calibrate) on stderr: "\r<what> done/total (p%), elapsed s,
// ETA s". Printed only when stderr is a terminal, so output piped to a file or another program (--json, CI logs, JSON
// log lines) stays machine-readable; TQ_TEST_FORCE_PROGRESS=1 prints it anyway (tests).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace tq {

class ProgressLine {
 public:
  // `allowed` false: never prints (e.g. the daemon with JSON logs).
  explicit ProgressLine(std::string what, bool allowed = true);
  // `done` of `total` units finished; `detail` (e.g. "ppl 23.41") follows the counts. The line ends with a newline
  // when done == total.
  void Update(int64_t done, int64_t total, std::string_view detail = {});

 private:
  std::string what_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tq
