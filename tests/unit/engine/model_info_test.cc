// InspectModel on the real files (SmolLM2, stories260K, a vocabulary-only file) and on hand-built ones.
#include "engine/model/model_info.h"

#include <gtest/gtest.h>

#include <limits>

#include "tests/unit/engine/gguf_builder.h"
#include "tests/unit/engine/test_paths.h"

namespace tq::engine {
namespace {

TEST(ModelInfoTest, SmolLm2) {
  TQ_SKIP_IF_MISSING(testing::SmolLm2Path());
  auto g = GgufFile::Open(testing::SmolLm2Path());
  ASSERT_TRUE(g.ok());
  auto info = InspectModel(**g, testing::SmolLm2Path());
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->architecture, "llama");
  EXPECT_EQ(info->file_type, "Q4_1");
  EXPECT_EQ(info->layers, 30);
  EXPECT_EQ(info->heads, 9);
  EXPECT_EQ(info->kv_heads, 3);
  EXPECT_EQ(info->head_dim, 64);
  EXPECT_EQ(info->context, 8192);
  EXPECT_EQ(info->vocab, 49152);
  EXPECT_EQ(info->rope_freq_base, 100000.0);
  EXPECT_EQ(info->tensor_count, 272);
  EXPECT_EQ(info->tensor_types.at("Q4_1").count, 210);
  EXPECT_EQ(info->tensor_types.at("Q8_0").count, 1);
  EXPECT_EQ(info->tensor_types.at("F32").count, 61);
  EXPECT_TRUE(info->unsupported_tensors.empty());
  EXPECT_EQ(info->tokenizer_model, "gpt2");
  EXPECT_EQ(info->tokenizer_pre, "smollm");
  EXPECT_EQ(info->eos_text, "<|im_end|>");
  EXPECT_TRUE(info->tokenizer_error.empty());
  EXPECT_TRUE(info->has_chat_template);
}

TEST(ModelInfoTest, Gemma3) {
  TQ_SKIP_IF_MISSING(testing::Gemma3Path());
  auto g = GgufFile::Open(testing::Gemma3Path());
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto info = InspectModel(**g, testing::Gemma3Path());
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->architecture, "gemma3");
  EXPECT_EQ(info->file_type, "Q4_K_M");
  EXPECT_EQ(info->layers, 18);
  EXPECT_EQ(info->head_dim, 256);
  EXPECT_EQ(info->kv_heads, 1);
  EXPECT_EQ(info->sliding_window, 512);
  EXPECT_EQ(info->tensor_types.at("Q5_0").count, 81);
  EXPECT_EQ(info->tensor_types.at("Q4_K").count, 27);
  EXPECT_EQ(info->tensor_types.at("Q6_K").count, 9);
  EXPECT_TRUE(info->unsupported_tensors.empty());
  EXPECT_TRUE(info->tokenizer_error.empty()) << info->tokenizer_error;
}

TEST(ModelInfoTest, Stories260K) {
  TQ_SKIP_IF_MISSING(testing::Stories260KPath());
  auto g = GgufFile::Open(testing::Stories260KPath());
  ASSERT_TRUE(g.ok());
  auto info = InspectModel(**g, testing::Stories260KPath());
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->layers, 5);
  EXPECT_EQ(info->embedding, 64);
  EXPECT_EQ(info->heads, 8);
  EXPECT_EQ(info->kv_heads, 4);
  EXPECT_EQ(info->head_dim, 8);
  EXPECT_EQ(info->vocab, 512);
  EXPECT_EQ(info->tensor_types.at("F32").count, 48);
  EXPECT_EQ(info->tokenizer_model, "llama");
  EXPECT_FALSE(info->has_chat_template);
}

TEST(ModelInfoTest, UnsupportedTypesAndTokenizersAreListedNotFatal) {
  testing::GgufBuilder b;
  b.AddString("general.architecture", "llama").AddU32("llama.block_count", 2);
  b.AddString("tokenizer.ggml.model", "bert");
  b.AddTensor("blk.0.ffn_down.weight", {256, 2}, kernels::WeightType::kQ2_K);
  b.AddTensor("blk.0.attn_q.weight", {256, 2}, kernels::WeightType::kQ4_K);
  std::vector<uint8_t> bytes = b.Build();
  auto g = GgufFile::Parse(bytes);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto info = InspectModel(**g, "mem");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->layers, 2);
  EXPECT_FALSE(info->heads.has_value());
  ASSERT_EQ(info->unsupported_tensors.size(), 1u);
  EXPECT_EQ(info->unsupported_tensors[0], "blk.0.ffn_down.weight (Q2_K)");
  EXPECT_FALSE(info->tensor_types.at("Q2_K").supported);
  EXPECT_NE(info->tokenizer_error.find("bert"), std::string::npos);
}

TEST(ModelInfoTest, WrongTypedHyperparameterIsAnError) {
  testing::GgufBuilder b;
  b.AddString("general.architecture", "llama").AddString("llama.block_count", "thirty");
  std::vector<uint8_t> bytes = b.Build();
  auto g = GgufFile::Parse(bytes);
  ASSERT_TRUE(g.ok());
  auto info = InspectModel(**g, "mem");
  ASSERT_FALSE(info.ok());
  EXPECT_NE(info.status().message().find("llama.block_count"), std::string::npos);
}

TEST(ModelInfoTest, PerLayerArrayOutsideIntegerRangeIsAnError) {
  // A float array where a per-layer integer is expected: NaN or 1e30 is a corrupt file (found by gguf_fuzz).
  for (float bad : {1e30f, -6.3e37f, std::numeric_limits<float>::quiet_NaN()}) {
    testing::GgufBuilder b;
    b.AddString("general.architecture", "llama").AddF32Array("llama.feed_forward_length", {64.0f, bad});
    std::vector<uint8_t> bytes = b.Build();
    auto g = GgufFile::Parse(bytes);
    ASSERT_TRUE(g.ok());
    auto info = InspectModel(**g, "mem");
    ASSERT_FALSE(info.ok()) << bad;
    EXPECT_NE(info.status().message().find("llama.feed_forward_length"), std::string::npos);
  }
  testing::GgufBuilder b;
  b.AddString("general.architecture", "llama").AddF32Array("llama.feed_forward_length", {64.0f, 96.0f});
  std::vector<uint8_t> bytes = b.Build();
  auto g = GgufFile::Parse(bytes);
  ASSERT_TRUE(g.ok());
  auto info = InspectModel(**g, "mem");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->feed_forward, 96);
}

}  // namespace
}  // namespace tq::engine
