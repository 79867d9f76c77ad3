// Embed requests on the real stories260K model: a unit vector of the model's width that does not depend on how
// the prompt was split into prefill chunks, next to a generation request in the same batch.
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "engine/runner/engine.h"
#include "tests/unit/engine/test_paths.h"

namespace tq::engine {
namespace {

GenerateEvent RunOne(Engine& e, GenerateRequest r) {
  std::mutex mu;
  std::condition_variable cv;
  GenerateEvent last;
  bool done = false;
  EXPECT_TRUE(e.Submit(std::move(r), [&](GenerateEvent&& ev) {
                 if (!ev.final) return;
                 std::lock_guard<std::mutex> lock(mu);
                 last = std::move(ev);
                 done = true;
                 cv.notify_all();
               }).ok());
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  return last;
}

std::vector<float> Embed(int max_batch_tokens, const std::string& text) {
  EngineOptions o;
  o.model_path = testing::Stories260KPath();
  o.threads = 1;
  o.ctx_size = 256;
  o.max_batch_tokens = max_batch_tokens;
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  GenerateRequest r;
  r.id = "e";
  r.prompt = (*e)->Tokenize(text, {});
  r.embed = true;
  const GenerateEvent ev = RunOne(**e, std::move(r));
  EXPECT_EQ(ev.finish_reason, FinishReason::kStop) << ev.error.ToString();
  EXPECT_EQ(ev.usage.completion_tokens, 0);
  return ev.embedding;
}

TEST(EngineEmbedTest, UnitVectorIndependentOfPrefillChunks) {
  const std::string text = "Once upon a time, there was a little girl named Lily. She loved to play outside.";
  const std::vector<float> whole = Embed(512, text);
  const std::vector<float> chunked = Embed(5, text);
  ASSERT_EQ(whole.size(), 64u);  // stories260K's n_embd
  ASSERT_EQ(chunked.size(), whole.size());
  double norm = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    norm += whole[i] * whole[i];
    EXPECT_NEAR(whole[i], chunked[i], 1e-4) << i;
  }
  EXPECT_NEAR(norm, 1.0, 1e-4);
}

TEST(EngineEmbedTest, RunsBesideGeneration) {
  EngineOptions o;
  o.model_path = testing::Stories260KPath();
  o.threads = 1;
  o.ctx_size = 256;
  auto e = Engine::Create(o);
  ASSERT_TRUE(e.ok());
  std::mutex mu;
  std::condition_variable cv;
  int finals = 0;
  GenerateEvent gen_final, embed_final;
  GenerateRequest g;
  g.id = "g";
  g.prompt = (*e)->Tokenize("Lily", {});
  g.max_tokens = 20;
  g.ignore_eos = true;
  g.sampling.temperature = 0;
  GenerateRequest m;
  m.id = "m";
  m.prompt = (*e)->Tokenize("Tom had a red ball.", {});
  m.embed = true;
  auto sink = [&](GenerateEvent* out) {
    return [&, out](GenerateEvent&& ev) {
      if (!ev.final) return;
      std::lock_guard<std::mutex> lock(mu);
      *out = std::move(ev);
      ++finals;
      cv.notify_all();
    };
  };
  ASSERT_TRUE((*e)->Submit(std::move(g), sink(&gen_final)).ok());
  ASSERT_TRUE((*e)->Submit(std::move(m), sink(&embed_final)).ok());
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return finals == 2; });
  EXPECT_EQ(gen_final.usage.completion_tokens, 20);
  EXPECT_TRUE(gen_final.embedding.empty());
  EXPECT_EQ(embed_final.embedding.size(), 64u);
}

}  // namespace
}  // namespace tq::engine
