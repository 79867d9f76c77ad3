// Paths to test data. Tests run from the repository root. Two kinds:
//   shipped: tests/data/ (WikiText-2, stories260K, tokenizer vocabularies; tests/data/README.md). Always present in
//            a clone, so a missing one fails the test.
//   fetched: the default model and Gemma 3 under ~/.cache/tqserve/models (scripts/fetch-model.sh, which the test
//            command runs). A missing one skips with the reason; CI fails on any skip (scripts/test-skips.py).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace tq::engine::testing {

inline constexpr const char* kDataDir = "tests/data/";

inline std::string DataPath(const std::string& relative) {
  return kDataDir + relative;
}

inline std::string Stories260KPath() {
  return DataPath("models/stories260K.gguf");
}

// The default model, fetched by scripts/fetch-model.sh.
inline std::string SmolLm2Path() {
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : "") + "/.cache/tqserve/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// Gemma 3 270M Q4_K_M, assembled from its four PyPI chunk packages (sha256 a5fd3b62...6818).
inline std::string Gemma3Path() {
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : "") + "/.cache/tqserve/models/gemma-3-270m-q4_k_m.gguf";
}

inline bool Exists(const std::string& path) {
  return std::filesystem::exists(path);
}

inline bool IsShipped(const std::string& path) {
  return path.rfind(kDataDir, 0) == 0;
}

}  // namespace tq::engine::testing

// Shipped data missing: a failure (the clone is broken). A fetched model missing: a skip naming the fetch command.
#define TQ_SKIP_IF_MISSING(path)                                                                         \
  do {                                                                                                   \
    if (!::tq::engine::testing::Exists(path)) {                                                          \
      if (::tq::engine::testing::IsShipped(path)) {                                                      \
        GTEST_FAIL() << "test data " << (path) << " is absent: it ships in tests/data (run from the "   \
                     << "repository root)";                                                              \
      }                                                                                                  \
      GTEST_SKIP() << "model " << (path) << " is absent (scripts/fetch-model.sh [--gemma3] fetches it)"; \
    }                                                                                                    \
  } while (0)
