// The model's identity in the prefix cache's fingerprint: a copy of the file has the same fingerprint, a file of
// the same shape and size with one weight byte changed has another; load progress counts every byte once.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "engine/runner/engine.h"
#include "tests/unit/engine/test_paths.h"

namespace tq::engine {
namespace {

std::vector<char> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void WriteAll(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

uint64_t FingerprintOf(const std::string& path, std::vector<std::pair<uint64_t, uint64_t>>* progress = nullptr) {
  EngineOptions o;
  o.model_path = path;
  o.threads = 1;
  o.ctx_size = 64;
  if (progress != nullptr) o.load_progress = [progress](uint64_t done, uint64_t total) { progress->push_back({done, total}); };
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? (*e)->fingerprint() : 0;
}

TEST(ModelCheckTest, FingerprintFollowsTheFileBytesNotOnlyTheShape) {
  const std::string original = testing::Stories260KPath();
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("tq-model-check-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<char> bytes = ReadAll(original);
  ASSERT_GT(bytes.size(), 1000u);
  const std::string copy = (dir / "copy.gguf").string(), changed = (dir / "changed.gguf").string();
  WriteAll(copy, bytes);
  bytes[bytes.size() - 3] ^= 0x01;  // the last tensor's data: same shape, same size, another weight
  WriteAll(changed, bytes);

  std::vector<std::pair<uint64_t, uint64_t>> progress;
  const uint64_t a = FingerprintOf(original, &progress);
  EXPECT_EQ(FingerprintOf(copy), a);
  EXPECT_NE(FingerprintOf(changed), a);
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.back().first, bytes.size());
  EXPECT_EQ(progress.back().second, bytes.size());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tq::engine
