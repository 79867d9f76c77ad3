// tqserve's tokenizer and forward pass against greedy continuations recorded from llama.cpp (tests/golden).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/llm/model.h"
#include "engine/tokenizer/tokenizer.h"

namespace tq::engine {
namespace {

std::string ModelDir() {
  const char* dir = std::getenv("TQ_MODEL_DIR");
  const char* home = std::getenv("HOME");
  return dir ? dir : (home ? std::string(home) + "/.cache/tqserve/models" : "");
}
std::string SmolLm2Path() { return ModelDir() + "/SmolLM2-135M-Instruct.Q4_1.gguf"; }
// Gemma 3 270M (scripts/fetch-model.sh --gemma3).
std::string Gemma3Path() { return ModelDir() + "/gemma-3-270m-q4_k_m.gguf"; }
// stories260K rewritten as a qwen2 file with q/k/v biases (tests/golden/make_arch_variant.py, run by the CTest
// fixture llm_qwen2_variant before this test).
std::string Qwen2VariantPath() {
  const char* dir = std::getenv("TQ_TEST_BINARY_DIR");
  return std::string(dir ? dir : ".") + "/tests/golden/stories260K-qwen2.gguf";
}

struct GoldenCase {
  std::string model_path;
  std::string golden;
};

class GoldenTest : public ::testing::TestWithParam<GoldenCase> {};

std::string CaseName(const ::testing::TestParamInfo<GoldenCase>& param) {
  static const char* const kNames[] = {"stories260K", "SmolLM2", "Gemma3", "qwen2"};
  return kNames[param.index];
}

TEST_P(GoldenTest, GreedyContinuationMatchesLlamaCpp) {
  const GoldenCase& c = GetParam();
  if (!std::filesystem::exists(c.model_path)) GTEST_SKIP() << c.model_path << " is absent";
  std::ifstream in(c.golden);
  ASSERT_TRUE(in) << c.golden;
  const nlohmann::json doc = nlohmann::json::parse(in);
  auto model = Model::Open(c.model_path);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto tok = Tokenizer::FromGguf((*model)->gguf());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  ThreadPool pool(2);
  for (const auto& cs : doc["cases"]) {
    const std::string prompt = cs["prompt"];
    const std::vector<int32_t> want_prompt = cs["prompt_ids"];
    const std::vector<int32_t> want = cs["greedy_ids"];
    const std::vector<int32_t> ids = (*tok)->Encode(prompt, {.add_special = true});
    EXPECT_EQ(ids, want_prompt) << "prompt ids of '" << prompt << "'";

    // Teacher forcing: one forward pass over the prompt and llama.cpp's continuation; at every step llama.cpp's
    // token must be our argmax, or a near tie (our logit within kTieMargin of our best) that f16 KV and 8-bit
    // activations in llama.cpp can flip. At least 90% of the steps must agree exactly.
    constexpr float kTieMargin = 0.25f;
    SequenceKv kv((*model)->hparams(), 512);
    std::vector<BatchToken> batch;
    const size_t n_prompt = want_prompt.size();
    for (size_t i = 0; i < n_prompt + want.size() - 1; ++i) {
      const int32_t t = i < n_prompt ? want_prompt[i] : want[i - n_prompt];
      batch.push_back({t, static_cast<int>(i), &kv, i + 1 >= n_prompt});
    }
    std::vector<float> logits;
    ASSERT_TRUE((*model)->Forward(batch, pool, &logits).ok());
    const int V = (*model)->hparams().vocab_size;
    size_t agree = 0;
    for (size_t step = 0; step < want.size(); ++step) {
      const float* row = logits.data() + step * V;
      const int32_t best = static_cast<int32_t>(std::max_element(row, row + V) - row);
      if (best == want[step]) {
        ++agree;
        continue;
      }
      EXPECT_LT(row[best] - row[want[step]], kTieMargin)
          << "'" << prompt << "' step " << step << ": llama.cpp chose " << want[step] << ", tqserve " << best;
    }
    EXPECT_GE(agree * 10, want.size() * 9) << "'" << prompt << "': " << agree << " of " << want.size() << " agree";
    if (c.golden.find("stories") != std::string::npos) {
      EXPECT_EQ(agree, want.size()) << "the f32 model must agree exactly";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GoldenTest,
                         ::testing::Values(GoldenCase{"tests/data/models/stories260K.gguf",
                                                      "tests/golden/stories260K_greedy.json"},
                                           GoldenCase{SmolLm2Path(), "tests/golden/smollm2_greedy.json"},
                                           GoldenCase{Gemma3Path(), "tests/golden/gemma3_270m_greedy.json"},
                                           GoldenCase{Qwen2VariantPath(),
                                                      "tests/golden/stories260K_qwen2_greedy.json"}),
                         CaseName);

// Gemma 3's architecture row and hyperparameters: five sliding-window layers, then one global, with their RoPE
// bases; QK-norm and post-norm weights bound.
TEST(Gemma3Test, SlidingWindowLayersAndWeights) {
  if (!std::filesystem::exists(Gemma3Path())) GTEST_SKIP() << Gemma3Path() << " is absent";
  auto model = Model::Open(Gemma3Path());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const HParams& hp = (*model)->hparams();
  EXPECT_EQ(hp.arch->name, "gemma3");
  EXPECT_EQ(hp.head_dim, 256);
  EXPECT_EQ(hp.sliding_window, 512);
  for (int l = 0; l < hp.n_layers; ++l) {
    const bool global = l % 6 == 5;
    EXPECT_EQ(hp.IsSlidingLayer(l), !global) << "layer " << l;
    EXPECT_EQ(hp.RopeBase(l), global ? 1e6f : 1e4f) << "layer " << l;
  }
  const LayerWeights& L = (*model)->weights().layers[0];
  EXPECT_TRUE(L.q_norm.present() && L.k_norm.present() && L.post_attn_norm.present() && L.post_ffn_norm.present());
  EXPECT_EQ(L.q_norm.cols, 256);
}

}  // namespace
}  // namespace tq::engine
