#include "common/progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tq {

ProgressLine::ProgressLine(std::string what, bool allowed)
    : what_(std::move(what)), start_(std::chrono::steady_clock::now()) {
  const char* force = std::getenv("TQ_TEST_FORCE_PROGRESS");
  enabled_ = allowed && (::isatty(STDERR_FILENO) == 1 || (force != nullptr && std::strcmp(force, "1") == 0));
}

void ProgressLine::Update(int64_t done, int64_t total, std::string_view detail) {
  if (!enabled_ || total <= 0) return;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double eta = done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total - done) : 0;
  // Trailing spaces clear what a longer earlier line left.
  std::fprintf(stderr, "\r%s %lld/%lld (%.0f%%), %.0f s, ETA %.0f s%s%.*s   ", what_.c_str(),
               static_cast<long long>(done), static_cast<long long>(total), 100.0 * done / total, elapsed, eta,
               detail.empty() ? "" : ": ", static_cast<int>(detail.size()), detail.data());
  if (done >= total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

}  // namespace tq
