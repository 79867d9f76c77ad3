// The engine on the GPU path (EngineOptions::device = "cuda"): its tokens against the CPU engine's, requests
// run together against each run alone, a pool too small for every request (admission waits, decode growth
// preempts and recomputes), the warm tier against the hot one, and an abort that gives the pages back. Needs
// a GPU (skipped otherwise) and SmolLM2-135M or a file with its shapes ($TQ_MODEL;
// bench/gpu/synthetic_gguf.py).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "engine/runner/engine.h"
#include "kernels/cuda/runtime.h"
#include "tests/unit/engine/test_paths.h"
#include "tests/unit/runner/engine_test_util.h"
#include "tests/unit/storage/storage_test_util.h"

namespace tq::engine {
namespace {

using testing::Collector;
using testing::Outcome;

std::string ModelPath() {
  if (const char* env = std::getenv("TQ_MODEL")) return env;
  return testing::SmolLm2Path();
}

// Token ids spread over the vocabulary (a synthetic model's vocabulary cannot spell text).
// The engine's store on the GPU path is the backend's: device (hot) and pinned (warm) pools, disk (cold).
uint64_t PoolCapacity(const EngineStats& s) {
  return s.kv_store.tiers[0].capacity_bytes + s.kv_store.tiers[1].capacity_bytes;
}
uint64_t PagesHeld(const EngineStats& s) {
  uint64_t pages = 0;
  for (const KvTierUsage& t : s.kv_store.tiers) pages += t.pages;
  return pages;
}

std::vector<int32_t> Ids(int n, int salt, int vocab) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i)
    ids.push_back(static_cast<int32_t>((int64_t{i} * 7919 + salt * 104729 + 11) % vocab));
  return ids;
}

class GpuEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dev = gpu::ProbeDevice();
    if (!dev.ok()) GTEST_SKIP() << "no GPU: " << dev.status().ToString();
    if (!std::filesystem::exists(ModelPath())) GTEST_SKIP() << ModelPath() << " is absent (set TQ_MODEL)";
  }

  static EngineOptions Options(const std::string& device, const std::string& format) {
    EngineOptions o;
    o.model_path = ModelPath();
    o.threads = 2;
    o.ctx_size = 1024;
    o.device = device;
    o.kv.k_format = format;
    o.kv.v_format = format;
    return o;
  }

  // Runs prompts of the given lengths (greedy, max_tokens each) at once; the engine's stats once settled.
  static std::pair<std::vector<Outcome>, EngineStats> Run(Engine& e, const std::vector<int>& lengths,
                                                          int max_tokens) {
    Collector c;
    for (size_t i = 0; i < lengths.size(); ++i) {
      GenerateRequest r;
      r.id = "r" + std::to_string(i);
      r.prompt = Ids(lengths[i], static_cast<int>(i), e.model().hparams().vocab_size);
      r.max_tokens = max_tokens;
      r.ignore_eos = true;
      r.sampling.temperature = 0;
      Status s = e.Submit(std::move(r), c.Sink(static_cast<int>(i)));
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    std::vector<Outcome> out = c.Wait(static_cast<int>(lengths.size()));
    return {out, testing::SettledStats(e)};
  }

  static std::unique_ptr<Engine> Make(const EngineOptions& o) {
    auto e = Engine::Create(o);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : nullptr;
  }
};

TEST_F(GpuEngineTest, FirstTokenMatchesTheCpuEngine) {
  auto cpu = Make(Options("cpu", "f16"));
  auto gpu = Make(Options("cuda", "f16"));
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(gpu, nullptr);
  ASSERT_TRUE(gpu->on_gpu());
  for (int len : {40, 300}) {
    auto [c, cs] = Run(*cpu, {len}, 4);
    auto [g, gs] = Run(*gpu, {len}, 4);
    ASSERT_EQ(g[0].reason, FinishReason::kLength) << g[0].error.ToString();
    ASSERT_EQ(g[0].tokens.size(), 4u);
    EXPECT_EQ(g[0].tokens[0], c[0].tokens[0]) << "prompt of " << len << " tokens";
  }
}

TEST_F(GpuEngineTest, RequestsTogetherGiveTheTokensOfEachAlone) {
  auto e = Make(Options("cuda", "tq4"));
  ASSERT_NE(e, nullptr);
  const std::vector<int> lengths = {150, 300, 700};
  auto [together, stats] = Run(*e, lengths, 40);
  for (size_t i = 0; i < lengths.size(); ++i) {
    auto [alone, s] = Run(*e, {lengths[i]}, 40);
    EXPECT_EQ(together[i].tokens, alone[0].tokens) << "request " << i;
    EXPECT_EQ(together[i].reason, FinishReason::kLength) << together[i].error.ToString();
  }
  EXPECT_GT(PoolCapacity(stats), 0u);
  EXPECT_EQ(PagesHeld(stats), 0u);
}

TEST_F(GpuEngineTest, SmallPoolWaitsPreemptsAndFinishesEveryRequest) {
  EngineOptions o = Options("cuda", "tq4");
  o.kv_store.hot_bytes = 1;  // the pool holds one context (1024 tokens per KV head), at least
  auto e = Make(o);
  ASSERT_NE(e, nullptr);
  const std::vector<int> lengths = {500, 450, 400};
  auto [together, stats] = Run(*e, lengths, 200);
  for (size_t i = 0; i < lengths.size(); ++i) {
    EXPECT_EQ(together[i].reason, FinishReason::kLength) << together[i].error.ToString();
    auto [alone, s] = Run(*e, {lengths[i]}, 200);
    EXPECT_EQ(together[i].tokens, alone[0].tokens) << "request " << i;
  }
  EXPECT_GT(stats.preemptions_total, 0u);  // 500 + 450 prompts fit 8 pages; their growth past it does not
  EXPECT_EQ(PagesHeld(stats), 0u);
}

TEST_F(GpuEngineTest, WarmHeadsGiveTheTokensOfHotHeads) {
  auto hot = Make(Options("cuda", "tq4"));
  EngineOptions o = Options("cuda", "tq4");
  o.gpu_warm_fraction = 0.5;
  auto warm = Make(o);
  ASSERT_NE(hot, nullptr);
  ASSERT_NE(warm, nullptr);
  auto [h, hs] = Run(*hot, {600}, 60);
  auto [w, ws] = Run(*warm, {600}, 60);
  EXPECT_EQ(h[0].tokens, w[0].tokens);
}

TEST_F(GpuEngineTest, ColdHeadsGiveTheTokensOfHotHeads) {
  storage::testing::TempDir dir;
  auto hot = Make(Options("cuda", "tq4"));
  EngineOptions o = Options("cuda", "tq4");
  o.gpu_warm_fraction = 0.25;
  o.gpu_cold_fraction = 0.5;
  o.kv_store.cold_dir = dir.path();
  auto cold = Make(o);
  ASSERT_NE(hot, nullptr);
  ASSERT_NE(cold, nullptr);
  auto [h, hs] = Run(*hot, {600, 300}, 60);
  auto [c, cs] = Run(*cold, {600, 300}, 60);
  EXPECT_EQ(h[0].tokens, c[0].tokens);
  EXPECT_EQ(h[1].tokens, c[1].tokens);
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/gpu/cold-0000.tqc"));
  // The engine's stats are the GPU store's: the cold pages were written and read back through its cold tier.
  EXPECT_TRUE(cs.kv_store.tiers[2].present);
  EXPECT_GT(cs.kv_store.tiers[2].io.writes, 0u);
  EXPECT_GT(cs.kv_store.tiers[2].io.reads, 0u);
  EXPECT_FALSE(hs.kv_store.tiers[2].present);
}

TEST_F(GpuEngineTest, AbortGivesThePagesBack) {
  auto e = Make(Options("cuda", "f16"));
  ASSERT_NE(e, nullptr);
  Collector c;
  GenerateRequest r;
  r.id = "long";
  r.prompt = Ids(400, 0, e->model().hparams().vocab_size);
  r.max_tokens = 600;
  r.ignore_eos = true;
  ASSERT_TRUE(e->Submit(std::move(r), c.Sink(0)).ok());
  for (int i = 0; i < 2000 && PagesHeld(e->Stats()) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_GT(PagesHeld(e->Stats()), 0u);
  EXPECT_TRUE(e->Abort("long"));
  std::vector<Outcome> out = c.Wait(1);
  EXPECT_EQ(out[0].reason, FinishReason::kAborted);
  EXPECT_EQ(PagesHeld(testing::SettledStats(*e)), 0u);
}

}  // namespace
}  // namespace tq::engine
