// Paths to shared test data (../shared from the repository root, where tests run). Tests that need a file
// GTEST_SKIP() with a clear message when it is absent (a user's machine has no ../shared).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace tq::engine::testing {

inline std::string SharedPath(const std::string& relative) {
  return "../shared/" + relative;
}

inline std::string Stories260KPath() {
  return SharedPath("models/stories260K.gguf");
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

}  // namespace tq::engine::testing

#define TQ_SKIP_IF_MISSING(path)                                                                          \
  do {                                                                                                    \
    if (!::tq::engine::testing::Exists(path)) {                                                           \
      GTEST_SKIP() << "test data " << (path) << " is absent (../shared is on developer machines and CI; " \
                   << "the default model comes from scripts/fetch-model.sh)";                             \
    }                                                                                                     \
  } while (0)
