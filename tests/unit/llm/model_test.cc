// The forward pass on the real stories260K model (tests/data/models, shipped in the repository).
#include "engine/llm/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

namespace tq::engine {
namespace {

constexpr const char* kStories = "tests/data/models/stories260K.gguf";

class ModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kStories)) << kStories << " is absent (run from the repository root)";
    auto m = Model::Open(kStories);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value();
  }

  // Logits of every position, computed one token per Forward call.
  std::vector<std::vector<float>> Sequential(const std::vector<int32_t>& tokens, ThreadPool& pool) {
    SequenceKv kv(model_->hparams(), 64);
    std::vector<std::vector<float>> out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      BatchToken t{tokens[i], static_cast<int>(i), &kv, true};
      std::vector<float> logits;
      EXPECT_TRUE(model_->Forward({&t, 1}, pool, &logits).ok());
      out.push_back(logits);
    }
    return out;
  }

  std::unique_ptr<Model> model_;
};

TEST_F(ModelTest, HyperparametersFromMetadata) {
  const HParams& hp = model_->hparams();
  EXPECT_EQ(hp.arch->name, "llama");
  EXPECT_EQ(hp.n_layers, 5);
  EXPECT_EQ(hp.n_embd, 64);
  EXPECT_EQ(hp.n_heads, 8);
  EXPECT_EQ(hp.n_kv_heads, 4);
  EXPECT_EQ(hp.head_dim, 8);
  EXPECT_EQ(hp.n_ff, 172);
  EXPECT_EQ(hp.vocab_size, 512);
}

TEST_F(ModelTest, BatchedPrefillMatchesTokenByToken) {
  ThreadPool pool(2);
  const std::vector<int32_t> tokens = {1, 403, 407, 261, 378, 404, 262, 426, 330, 261, 500};
  const auto expected = Sequential(tokens, pool);

  SequenceKv kv(model_->hparams(), 64);
  std::vector<BatchToken> batch;
  for (size_t i = 0; i < tokens.size(); ++i) batch.push_back({tokens[i], static_cast<int>(i), &kv, true});
  std::vector<float> logits;
  ASSERT_TRUE(model_->Forward(batch, pool, &logits).ok());
  const int V = model_->hparams().vocab_size;
  ASSERT_EQ(logits.size(), tokens.size() * V);
  for (size_t i = 0; i < tokens.size(); ++i) {
    for (int j = 0; j < V; ++j) ASSERT_NEAR(logits[i * V + j], expected[i][j], 1e-3) << "pos " << i << " id " << j;
  }
  EXPECT_EQ(kv.n_tokens(), static_cast<int>(tokens.size()));
}

TEST_F(ModelTest, TwoSequencesInOneBatchDoNotMix) {
  ThreadPool pool(2);
  const std::vector<int32_t> a = {1, 403, 407, 261}, b = {1, 330, 261, 500, 404};
  const auto ea = Sequential(a, pool), eb = Sequential(b, pool);
  SequenceKv kva(model_->hparams(), 64), kvb(model_->hparams(), 64);
  std::vector<BatchToken> batch;
  for (size_t i = 0; i < a.size(); ++i) batch.push_back({a[i], static_cast<int>(i), &kva, i + 1 == a.size()});
  for (size_t i = 0; i < b.size(); ++i) batch.push_back({b[i], static_cast<int>(i), &kvb, i + 1 == b.size()});
  std::vector<float> logits;
  ASSERT_TRUE(model_->Forward(batch, pool, &logits).ok());
  const int V = model_->hparams().vocab_size;
  ASSERT_EQ(logits.size(), 2u * V);
  for (int j = 0; j < V; ++j) {
    ASSERT_NEAR(logits[j], ea.back()[j], 1e-3);
    ASSERT_NEAR(logits[V + j], eb.back()[j], 1e-3);
  }
}

TEST_F(ModelTest, ThreadCountDoesNotChangeResults) {
  ThreadPool one(1), two(3);
  const std::vector<int32_t> tokens = {1, 403, 407, 261, 378};
  const auto a = Sequential(tokens, one), b = Sequential(tokens, two);
  for (size_t i = 0; i < a.size(); ++i) {
    for (size_t j = 0; j < a[i].size(); ++j) ASSERT_NEAR(a[i][j], b[i][j], 1e-5);
  }
}

TEST_F(ModelTest, BadTokenAndPositionAreErrors) {
  ThreadPool pool(1);
  SequenceKv kv(model_->hparams(), 8);
  std::vector<float> logits;
  BatchToken bad_token{512, 0, &kv, true};
  EXPECT_EQ(model_->Forward({&bad_token, 1}, pool, &logits).code(), StatusCode::kInvalidArgument);
  BatchToken bad_pos{1, 8, &kv, true};
  EXPECT_EQ(model_->Forward({&bad_pos, 1}, pool, &logits).code(), StatusCode::kOutOfRange);
}

// A pass started at layer l, on a fresh sequence, from the layer inputs a whole pass recorded gives the whole
// pass's logits bit for bit.
TEST_F(ModelTest, ResumedPassMatchesTheWholePass) {
  ThreadPool pool(2);
  const std::vector<int32_t> tokens = {1, 403, 407, 261, 378, 404, 262, 426, 330};
  const auto run = [&](SequenceKv& kv, std::vector<float>* logits, const ForwardLayers& layers) {
    std::vector<BatchToken> batch;
    for (size_t i = 0; i < tokens.size(); ++i) batch.push_back({tokens[i], static_cast<int>(i), &kv, true});
    return model_->Forward(batch, pool, logits, nullptr, layers);
  };
  const int L = model_->hparams().n_layers;
  LayerInputs inputs;
  SequenceKv whole(model_->hparams(), 64);
  std::vector<float> expected;
  ASSERT_TRUE(run(whole, &expected, {.record = &inputs}).ok());
  ASSERT_EQ(inputs.x.size(), static_cast<size_t>(L) * tokens.size() * model_->hparams().n_embd);
  for (int first = 0; first < L; ++first) {
    SequenceKv kv(model_->hparams(), 64);
    std::vector<float> logits;
    ASSERT_TRUE(run(kv, &logits, {.resume = &inputs, .first_layer = first}).ok()) << first;
    EXPECT_EQ(logits, expected) << "resumed at layer " << first;
  }
  // Misuse: a later layer without a record, a record of another batch, a layer outside the model.
  SequenceKv kv(model_->hparams(), 64);
  std::vector<float> logits;
  EXPECT_EQ(run(kv, &logits, {.first_layer = 2}).code(), StatusCode::kInvalidArgument);
  LayerInputs short_record{std::vector<float>(7)};
  EXPECT_EQ(run(kv, &logits, {.resume = &short_record, .first_layer = 1}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(run(kv, &logits, {.resume = &inputs, .first_layer = L}).code(), StatusCode::kInvalidArgument);
}

TEST(ModelOpenTest, MissingFileIsAnError) {
  auto m = Model::Open("/nonexistent/model.gguf");
  EXPECT_FALSE(m.ok());
}

}  // namespace
}  // namespace tq::engine
