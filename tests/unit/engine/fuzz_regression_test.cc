// Inputs the fuzzers once broke on (testdata/fuzz_regressions/gguf-*.bin), run through the same checks as
// tests/fuzz/gguf_fuzz.cc: parse, build the tokenizer, encode and decode a fixed text, summarize.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "engine/model/gguf.h"
#include "engine/model/model_info.h"
#include "engine/tokenizer/tokenizer.h"

namespace tq::engine {
namespace {

TEST(FuzzRegressionTest, GgufInputs) {
  const std::filesystem::path dir = "tests/unit/engine/testdata/fuzz_regressions";
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << "run from the repository root";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!entry.path().filename().string().starts_with("gguf-")) continue;
    ++files;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::vector<uint8_t> bytes(std::istreambuf_iterator<char>(in), {});
    auto file = GgufFile::Parse(bytes);
    if (!file.ok()) continue;
    auto tok = Tokenizer::FromGguf(**file);
    if (tok.ok()) {
      const std::vector<TokenId> ids =
          (*tok)->Encode("Hello world 123 <s>\n\xC3\xA9", {.parse_special = true});
      for (TokenId id : ids) {
        EXPECT_GE(id, 0) << entry.path();
        EXPECT_LT(id, (*tok)->vocab_size()) << entry.path();
      }
      (*tok)->Decode(ids, {.unparse_special = true});
    }
    InspectModel(**file, entry.path().string()).status().IgnoreError();
  }
  EXPECT_GT(files, 0);
}

}  // namespace
}  // namespace tq::engine
