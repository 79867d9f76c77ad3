// tqserve's tokenizer and forward pass against greedy continuations recorded from llama.cpp (tests/golden).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/llm/lora.h"
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
std::string VariantPath(const std::string& name) {
  const char* dir = std::getenv("TQ_TEST_BINARY_DIR");
  return std::string(dir ? dir : ".") + "/tests/golden/stories260K-" + name + ".gguf";
}
std::string Qwen2VariantPath() { return VariantPath("qwen2"); }
// stories260K with Llama 3.1's RoPE scaling: a rope_freqs.weight tensor (fixture llm_llama3_variant).
std::string Llama3VariantPath() { return VariantPath("llama3"); }

struct GoldenCase {
  std::string model_path;
  std::string golden;
};

class GoldenTest : public ::testing::TestWithParam<GoldenCase> {};

std::string CaseName(const ::testing::TestParamInfo<GoldenCase>& param) {
  static const char* const kNames[] = {"stories260K", "SmolLM2", "Gemma3", "qwen2", "llama3_rope_scaling", "qwen3",
                                      "phi3",        "gemma2"};
  return kNames[param.index];
}

// Teacher forcing: one forward pass over each case's prompt and llama.cpp's continuation; at every step llama.cpp's
// token must be our argmax, or a near tie (our logit within kTieMargin of our best) that f16 KV and 8-bit
// activations in llama.cpp can flip. At least 90% of the steps must agree exactly; all of them for the f32 models
// (`exact`).
void ExpectGolden(const Model& model, const Tokenizer& tok, const nlohmann::json& doc, bool exact,
                  const LoraAdapter* lora = nullptr) {
  constexpr float kTieMargin = 0.25f;
  ThreadPool pool(2);
  for (const auto& cs : doc["cases"]) {
    const std::string prompt = cs["prompt"];
    const std::vector<int32_t> want_prompt = cs["prompt_ids"];
    const std::vector<int32_t> want = cs["greedy_ids"];
    const std::vector<int32_t> ids = tok.Encode(prompt, {.add_special = true});
    EXPECT_EQ(ids, want_prompt) << "prompt ids of '" << prompt << "'";
    SequenceKv kv(model.hparams(), 512);
    std::vector<BatchToken> batch;
    const size_t n_prompt = want_prompt.size();
    for (size_t i = 0; i < n_prompt + want.size() - 1; ++i) {
      const int32_t t = i < n_prompt ? want_prompt[i] : want[i - n_prompt];
      batch.push_back({t, static_cast<int>(i), &kv, i + 1 >= n_prompt, false, lora});
    }
    std::vector<float> logits;
    ASSERT_TRUE(model.Forward(batch, pool, &logits).ok());
    const int V = model.hparams().vocab_size;
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
    if (exact) {
      EXPECT_EQ(agree, want.size()) << "the f32 model must agree exactly";
    }
  }
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  return in ? nlohmann::json::parse(in) : nlohmann::json::object();
}

TEST_P(GoldenTest, GreedyContinuationMatchesLlamaCpp) {
  const GoldenCase& c = GetParam();
  if (!std::filesystem::exists(c.model_path)) GTEST_SKIP() << c.model_path << " is absent";
  const nlohmann::json doc = ReadJson(c.golden);
  auto model = Model::Open(c.model_path);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto tok = Tokenizer::FromGguf((*model)->gguf());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  ExpectGolden(**model, **tok, doc, c.golden.find("stories") != std::string::npos);
}

// A LoRA adapter (tests/golden/make_lora.py, fixture llm_lora_adapter: every attention and FFN matrix and the
// output, F16, rank 8, alpha 16) on stories260K at scale 0.75, against llama.cpp with the same adapter.
TEST(LoraGoldenTest, GreedyContinuationMatchesLlamaCpp) {
  auto model = Model::Open("tests/data/models/stories260K.gguf");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto tok = Tokenizer::FromGguf((*model)->gguf());
  ASSERT_TRUE(tok.ok());
  const nlohmann::json doc = ReadJson("tests/golden/stories260K_lora_greedy.json");
  ASSERT_TRUE(doc.contains("lora"));
  const float scale = doc["lora"]["scale"];
  auto lora = LoraAdapter::Open(VariantPath("lora"), "golden", scale, (*model)->hparams(), (*model)->weights());
  ASSERT_TRUE(lora.ok()) << lora.status().ToString();
  EXPECT_EQ((*lora)->adapted_matrices(), 36);
  EXPECT_EQ((*lora)->max_rank(), 8);
  ExpectGolden(**model, **tok, doc, /*exact=*/false, lora->get());
  // The adapter changes the output: the plain golden differs.
  const nlohmann::json plain = ReadJson("tests/golden/stories260K_greedy.json");
  EXPECT_NE(plain["cases"][0]["greedy_ids"], doc["cases"][0]["greedy_ids"]);
}

INSTANTIATE_TEST_SUITE_P(Models, GoldenTest,
                         ::testing::Values(GoldenCase{"tests/data/models/stories260K.gguf",
                                                      "tests/golden/stories260K_greedy.json"},
                                           GoldenCase{SmolLm2Path(), "tests/golden/smollm2_greedy.json"},
                                           GoldenCase{Gemma3Path(), "tests/golden/gemma3_270m_greedy.json"},
                                           GoldenCase{Qwen2VariantPath(),
                                                      "tests/golden/stories260K_qwen2_greedy.json"},
                                           GoldenCase{Llama3VariantPath(),
                                                      "tests/golden/stories260K_llama3_greedy.json"},
                                           GoldenCase{VariantPath("qwen3"), "tests/golden/stories260K_qwen3_greedy.json"},
                                           GoldenCase{VariantPath("phi3"), "tests/golden/stories260K_phi3_greedy.json"},
                                           GoldenCase{VariantPath("gemma2"),
                                                      "tests/golden/stories260K_gemma2_greedy.json"}),
                         CaseName);

// The RoPE scaling golden can fail: the divisors change stories260K's greedy continuations, so a forward pass that
// ignored rope_freqs.weight would not match the llama3 golden.
TEST(RopeScalingTest, DivisorsAreBoundAndChangeTheOutput) {
  auto model = Model::Open(Llama3VariantPath());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const Weight& f = (*model)->weights().rope_freqs;
  ASSERT_TRUE(f.present());
  EXPECT_EQ(f.cols, (*model)->hparams().n_rot / 2);
  std::ifstream plain("tests/golden/stories260K_greedy.json"), scaled("tests/golden/stories260K_llama3_greedy.json");
  ASSERT_TRUE(plain && scaled);
  const nlohmann::json a = nlohmann::json::parse(plain), b = nlohmann::json::parse(scaled);
  ASSERT_EQ(a["cases"].size(), b["cases"].size());
  int differ = 0;
  for (size_t i = 0; i < a["cases"].size(); ++i) differ += a["cases"][i]["greedy_ids"] != b["cases"][i]["greedy_ids"];
  EXPECT_GT(differ, 0) << "the scaled golden equals the plain one: it cannot tell scaling from none";
}

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

// Gemma 2's row and hyperparameters on the stories260K variant (fixture llm_gemma2_variant): alternating sliding
// windows, both soft caps, post norms; the logits stay inside the final cap. The attention cap changes llama.cpp's
// continuations (a golden recorded from the same file without attn_logit_softcapping differs), so the gemma2
// golden case fails if the kernels ignore the cap.
TEST(Gemma2Test, SoftCapsWindowsAndPostNorms) {
  auto model = Model::Open(VariantPath("gemma2"));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const HParams& hp = (*model)->hparams();
  EXPECT_EQ(hp.arch->name, "gemma2");
  EXPECT_EQ(hp.sliding_window, 8);
  EXPECT_FLOAT_EQ(hp.attn_softcap, 1.0f);
  EXPECT_FLOAT_EQ(hp.logit_softcap, 4.0f);
  EXPECT_EQ(hp.attn_scale, 0.0f) << "only the 46-layer Gemma 2 (27B) scales by n_embd / n_heads";
  for (int l = 0; l < hp.n_layers; ++l) {
    EXPECT_EQ(hp.IsSlidingLayer(l), l % 2 == 0) << "layer " << l;
    EXPECT_EQ(hp.RopeBase(l), hp.rope_base) << "layer " << l;
    const LayerWeights& L = (*model)->weights().layers[l];
    EXPECT_TRUE(L.post_attn_norm.present() && L.post_ffn_norm.present()) << "layer " << l;
    EXPECT_FALSE(L.q_norm.present()) << "layer " << l;
  }
  ThreadPool pool(2);
  SequenceKv kv(hp, 64);
  std::vector<BatchToken> batch;
  for (int i = 0; i < 20; ++i) batch.push_back({(i * 37 + 1) % hp.vocab_size, i, &kv, true, false, nullptr});
  std::vector<float> logits;
  ASSERT_TRUE((*model)->Forward(batch, pool, &logits).ok());
  for (float z : logits) ASSERT_LT(std::abs(z), 4.0f);
  const nlohmann::json capped = ReadJson("tests/golden/stories260K_gemma2_greedy.json");
  const nlohmann::json uncapped = ReadJson("tests/golden/stories260K_gemma2_noattncap_greedy.json");
  ASSERT_EQ(capped["cases"].size(), uncapped["cases"].size());
  int differ = 0;
  for (size_t i = 0; i < capped["cases"].size(); ++i) {
    differ += capped["cases"][i]["greedy_ids"] != uncapped["cases"][i]["greedy_ids"];
  }
  EXPECT_GT(differ, 0) << "the attention cap does not change llama.cpp's continuations: the golden cannot see it";
}

}  // namespace
}  // namespace tq::engine
