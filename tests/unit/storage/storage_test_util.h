// Helpers shared by the storage tests: temporary directories, backend parameters, page contents.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "storage/io_queue.h"
#include "storage/uring_queue.h"

namespace tq::storage::testing {

// A fresh directory under $TQ_TEST_BINARY_DIR (the build dir, a real disk) or /tmp, removed at the end.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TQ_TEST_BINARY_DIR");
    std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/tq-storage-XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    char* made = ::mkdtemp(buf.data());
    EXPECT_NE(made, nullptr);
    path_ = made != nullptr ? made : "/tmp";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Skips the current test with a clear message when io_uring cannot be set up here.
inline bool UringAvailable(std::string* why) {
  StatusOr<std::unique_ptr<IoQueue>> q = MakeUringQueue(IoQueueOptions{"io_uring", 4});
  if (!q.ok()) *why = q.status().ToString();
  return q.ok();
}

#define TQ_SKIP_IF_NO_BACKEND(backend)                                                       \
  do {                                                                                       \
    std::string why_;                                                                        \
    if (std::string_view(backend) == "io_uring" &&                                           \
        !::tq::storage::testing::UringAvailable(&why_)) {                                    \
      GTEST_SKIP() << "io_uring unavailable in this environment (" << why_ << "); skipping"; \
    }                                                                                        \
  } while (0)

// Deterministic page contents: page `id` of `length` bytes.
inline std::vector<std::byte> PageBytes(uint64_t id, size_t length) {
  std::vector<std::byte> out(length);
  std::mt19937_64 rng(id * 0x9E3779B97F4A7C15ull + 1);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  return out;
}

inline std::string BackendName(const ::testing::TestParamInfo<std::string>& info) {
  return info.param == "io_uring" ? "IoUring" : "Pread";
}

}  // namespace tq::storage::testing
