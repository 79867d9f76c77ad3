// The engine with the KV tiers on the real default model (SmolLM2-135M, skipped where it was not fetched):
// the cold tier on a real directory gives the same tokens as RAM, a cold read fault recomputes the sequence
// (FaultQueue injects it) and never fails or corrupts the request, and a tight budget preempts and recomputes.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "engine/runner/engine.h"
#include "kernels/formats/page.h"
#include "storage/fault_queue.h"
#include "tests/unit/engine/test_paths.h"
#include "tests/unit/runner/engine_test_util.h"
#include "tests/unit/storage/storage_test_util.h"

namespace tq::engine {
namespace {

using testing::Collector;
using testing::Outcome;
using testing::Prompt;
using testing::RunAll;
using testing::RunOn;
using testing::SettledStats;

EngineOptions Options(const KvStoreOptions& store) {
  EngineOptions o;
  o.model_path = testing::SmolLm2Path();
  o.threads = 2;
  o.ctx_size = 1024;
  o.kv.preset = "uniform:tq4";  // every head SPARSE: the cold tier's class
  o.kv_store = store;
  return o;
}

// Bytes of one uniform:tq4 page, K and V, as a RAM slot holds it (head_dim 64: SmolLM2; 256: Gemma 3).
uint64_t Tq4PageBytes(int head_dim = 64) {
  const uint64_t b = 2 * kernels::PageBytes(kernels::KvFormat::kTq4, head_dim).value();
  return (b + 63) / 64 * 64;
}

// Share of positions where two token sequences agree.
double Agreement(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  if (a.empty() || a.size() != b.size()) return 0;
  size_t same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
  return static_cast<double>(same) / a.size();
}

class EngineKvTest : public ::testing::Test {
 protected:
  void SetUp() override { TQ_SKIP_IF_MISSING(testing::SmolLm2Path()); }
  storage::testing::TempDir dir_;
};

TEST_F(EngineKvTest, ColdTierGivesTheSameTokensAsRam) {
  const std::vector<std::pair<int, int>> reqs = {{300, 40}};
  auto [ram, ram_stats] = RunAll(Options({}), reqs);
  KvStoreOptions cold;
  cold.cold_dir = dir_.path();
  cold.cold_cache_bytes = 64 << 10;  // far less than the sequence's cold pages: attention reads the disk
  auto [disk, disk_stats] = RunAll(Options(cold), reqs);
  ASSERT_EQ(ram.size(), 1u);
  ASSERT_EQ(disk.size(), 1u);
  EXPECT_EQ(ram[0].reason, FinishReason::kLength);
  EXPECT_EQ(disk[0].reason, FinishReason::kLength) << disk[0].error.ToString();
  EXPECT_EQ(disk[0].tokens, ram[0].tokens);
  EXPECT_GT(disk_stats.kv_store.tiers[2].io.writes, 0u);
  EXPECT_GT(disk_stats.kv_store.tiers[2].io.reads, 0u);
  EXPECT_EQ(ram_stats.kv_store.tiers[2].io.reads, 0u);
}

// The gauges a client reads after its first token count its request as running (they once moved only at the
// end of the step that emitted the token, and a cancel test read a stale 0 and stopped waiting).
TEST_F(EngineKvTest, TheFirstTokenArrivesWithTheRequestCountedAsRunning) {
  auto e = Engine::Create(Options({}));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  std::mutex mu;
  std::condition_variable cv;
  std::vector<EngineStats> seen;  // the stats read inside the sink at each event, as a client would after it
  bool done = false;
  GenerateRequest r;
  r.id = "gauge";
  r.prompt = Prompt(**e, 40);
  r.max_tokens = 3;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  Engine* engine = e->get();
  ASSERT_TRUE(engine
                  ->Submit(std::move(r),
                           [&](GenerateEvent&& ev) {
                             const EngineStats st = engine->Stats();
                             std::lock_guard<std::mutex> lock(mu);
                             if (!ev.final) seen.push_back(st);
                             if (ev.final) done = true;
                             cv.notify_all();
                           })
                  .ok());
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  ASSERT_FALSE(seen.empty());
  for (const EngineStats& st : seen) {
    EXPECT_EQ(st.running, 1);
    EXPECT_EQ(st.waiting, 0);
  }
}

TEST_F(EngineKvTest, ColdReadFaultsRecomputeTheSequence) {
  const std::vector<std::pair<int, int>> reqs = {{300, 40}};
  auto [ref, ref_stats] = RunAll(Options({}), reqs);
  for (storage::FaultKind kind : {storage::FaultKind::kEio, storage::FaultKind::kCorrupt}) {
    storage::testing::TempDir dir;
    KvStoreOptions cold;
    cold.cold_dir = dir.path();
    cold.cold_cache_bytes = 64 << 10;
    cold.wrap_queue = [kind](std::unique_ptr<storage::IoQueue> inner) -> std::unique_ptr<storage::IoQueue> {
      auto q = std::make_unique<storage::FaultQueue>(std::move(inner), 3);
      // 100 bad reads in a row: a failed prefetch is retried by attention's own read, so a single bad read may
      // never reach a sequence; a run of them does.
      std::vector<uint64_t> bad;
      for (uint64_t n = 200; n < 300; ++n) bad.push_back(n);
      q->AddRule({kind, storage::IoOp::kRead, bad, 0});
      return q;
    };
    auto [out, stats] = RunAll(Options(cold), reqs);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].reason, FinishReason::kLength) << out[0].error.ToString();
    EXPECT_EQ(out[0].tokens.size(), 40u);
    EXPECT_GE(stats.kv_faults_total, 1u);
    EXPECT_GE(stats.recomputes_total, 1u);
    // Recomputed KV comes from a prefill where the original came from decode steps: the same math in another
    // order, so greedy tokens may drift late; what was served was computed from correct KV only.
    EXPECT_GE(Agreement(out[0].tokens, ref[0].tokens), 0.8);
  }
}

TEST_F(EngineKvTest, ATightBudgetPreemptsAndRecomputes) {
  // Two sequences of 100 + 200 tokens each need 2 pages per head (180 pages of ~8.4 KiB) at the end; the warm
  // tier holds 250: the newer one is preempted when both cross 256 tokens, and runs again after.
  KvStoreOptions tight;
  tight.hot_bytes = 0;
  tight.warm_bytes = 250 * Tq4PageBytes();
  const std::vector<std::pair<int, int>> reqs = {{100, 200}, {100, 200}};
  auto [alone, alone_stats] = RunAll(Options({}), {{100, 200}});
  auto [out, stats] = RunAll(Options(tight), reqs);
  ASSERT_EQ(out.size(), 2u);
  for (const Outcome& o : out) {
    EXPECT_EQ(o.reason, FinishReason::kLength) << o.error.ToString();
    EXPECT_EQ(o.tokens.size(), 200u);
    EXPECT_GE(Agreement(o.tokens, alone[0].tokens), 0.8);
  }
  EXPECT_GE(stats.preemptions_total, 1u);
}

TEST_F(EngineKvTest, APromptLargerThanEveryBudgetIsRefusedClearly) {
  KvStoreOptions tiny;
  tiny.hot_bytes = 0;
  tiny.warm_bytes = 20 * Tq4PageBytes();  // 20 pages: not one page per head
  auto [out, stats] = RunAll(Options(tiny), {{300, 4}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].reason, FinishReason::kError);
  EXPECT_EQ(out[0].error.code(), StatusCode::kResourceExhausted) << out[0].error.ToString();
  // The message names the pages the prompt fills (a page per layer and KV head per 128 tokens filled: SmolLM2's
  // 30 x 3 pairs x 2; the tail's rows are not a page yet) and the tiers.
  EXPECT_NE(out[0].error.message().find("180 pages) does not fit the KV tier budgets (no hot tier, warm"),
            std::string::npos)
      << out[0].error.message();
}

TEST_F(EngineKvTest, SlidingWindowLayersAreNotReservedForTheWholePrompt) {
  // Gemma 3 270M: 15 of its 18 layers (one KV head each) see the last 512 positions and release older pages.
  // A 1536-token prompt fills 12 pages per layer (216 in all), but in passes of 128 tokens a sliding layer holds
  // at most 7 at once (141 in all): a 180-page budget serves it. Admission used to reserve all 216 and refuse it.
  TQ_SKIP_IF_MISSING(testing::Gemma3Path());
  EngineOptions o = Options({});
  o.model_path = testing::Gemma3Path();
  o.ctx_size = 2048;
  o.max_batch_tokens = 128;
  o.kv_store.hot_bytes = 0;
  o.kv_store.warm_bytes = 180 * Tq4PageBytes(256);
  auto [out, stats] = RunAll(o, {{1536, 4}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].reason, FinishReason::kLength) << out[0].error.ToString();
  EXPECT_EQ(out[0].tokens.size(), 4u);
  EXPECT_EQ(stats.preemptions_total, 0u);
}

TEST_F(EngineKvTest, ASecondRequestReusesTheCachedPrefix) {
  EngineOptions o = Options({});
  o.kv.boundary_layers = 2;  // f16 HOT heads in the hot tier, tq4 SPARSE in the warm tier
  auto e = Engine::Create(o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  auto [first, s1] = RunOn(**e, {{300, 20}});
  auto [second, s2] = RunOn(**e, {{300, 20}});
  EXPECT_EQ(first[0].cached_tokens, 0);
  EXPECT_EQ(second[0].cached_tokens, 256);  // two full pages; the rest of the prompt is computed
  EXPECT_EQ(second[0].tokens, first[0].tokens);
  EXPECT_EQ(s2.prefix_cache.hits, 1u);
  EXPECT_EQ(s2.prefix_cache.hit_tokens, 256u);
  // Prefill + 20 decode steps made 2 full pages per head of 320 tokens; both are cached.
  EXPECT_EQ(s1.prefix_cache.entries, 2u);
  // Without the cache the second request computes everything.
  o.prefix_cache_bytes = 0;
  auto [off, s3] = RunAll(o, {{300, 20}});
  EXPECT_EQ(off[0].cached_tokens, 0);
  EXPECT_EQ(off[0].tokens, first[0].tokens);
}

TEST_F(EngineKvTest, TheCachedPrefixSurvivesARestartThroughTheColdTier) {
  KvStoreOptions cold;
  cold.cold_dir = dir_.path();
  EngineOptions o = Options(cold);
  o.kv.boundary_layers = 2;  // HOT pages move from RAM to the cold tier when their request ends
  std::vector<int32_t> reference;
  {
    auto e = Engine::Create(o);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    auto [out, stats] = RunOn(**e, {{300, 20}});
    reference = out[0].tokens;
  }  // clean shutdown: the cached pages are on disk
  {
    auto e = Engine::Create(o);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_EQ((*e)->Stats().prefix_cache.recovered_entries, 0u);  // stats refresh after a step
    auto [out, stats] = RunOn(**e, {{300, 20}});
    EXPECT_EQ(stats.prefix_cache.recovered_entries, 2u);
    EXPECT_EQ(out[0].cached_tokens, 256);
    EXPECT_EQ(out[0].tokens, reference);
  }
  // A corrupt cold file is dropped, not trusted: flip bytes all over it; the answer is still right.
  for (const auto& f : std::filesystem::directory_iterator(dir_.path())) {
    std::fstream file(f.path(), std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(0, std::ios::end);
    const std::streamoff size = file.tellg();
    for (std::streamoff at = 8192; at < size; at += 4096 * 3 + 512) {
      file.seekp(at);
      file.put('\x5a');
    }
  }
  {
    auto e = Engine::Create(o);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    auto [out, stats] = RunOn(**e, {{300, 20}});
    EXPECT_EQ(out[0].reason, FinishReason::kLength) << out[0].error.ToString();
    EXPECT_LT(out[0].cached_tokens, 256);
    EXPECT_EQ(out[0].tokens, reference);
  }
}

TEST_F(EngineKvTest, AnotherLayoutDoesNotReuseTheColdPages) {
  KvStoreOptions cold;
  cold.cold_dir = dir_.path();
  {
    auto e = Engine::Create(Options(cold));
    ASSERT_TRUE(e.ok());
    RunOn(**e, {{300, 4}});
  }
  EngineOptions other = Options(cold);
  other.kv.preset = "uniform:tq3";  // other formats: other fingerprint (and slot size)
  auto e = Engine::Create(other);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  auto [out, stats] = RunOn(**e, {{300, 4}});
  EXPECT_EQ(out[0].cached_tokens, 0);
  EXPECT_EQ(stats.prefix_cache.recovered_entries, 0u);
}

TEST_F(EngineKvTest, OnlineAdaptationMovesHeadsAndReencodesTheirPages) {
  // A profile that ranks heads by their index: unrelated to how they attend, so adaptation has work to do.
  HeadProfile profile;
  profile.model = "test";
  profile.n_layers = 30;
  profile.n_kv_heads = 3;
  profile.queries = 1;
  for (int i = 0; i < 90; ++i) profile.score.push_back(i);
  const std::string path = dir_.path() + "/profile.json";
  ASSERT_TRUE(SaveHeadProfile(profile, path).ok());
  EngineOptions o = Options({});
  o.kv.preset = "longdoc";
  o.kv.profile_path = path;
  o.kv_adapt = true;
  o.adapt.window = 8;
  o.adapt.every = 8;
  o.adapt.margin = 2;
  o.prefix_cache_bytes = 0;
  auto [out, stats] = RunAll(o, {{300, 120}, {200, 120}});
  ASSERT_EQ(out.size(), 2u);
  for (const Outcome& r : out) {
    EXPECT_EQ(r.reason, FinishReason::kLength) << r.error.ToString();
    EXPECT_EQ(r.tokens.size(), 120u);
  }
  EXPECT_GT(stats.class_changes_total, 0u);
  EXPECT_EQ(stats.class_changes_total % 2, 0u);  // moves come in pairs: the preset's shares stay
  EXPECT_EQ(stats.kv_class_heads[1], 54);  // longdoc on 90 heads: 9 HOT, 54 ACTIVE, 27 SPARSE
  EXPECT_EQ(stats.kv_class_heads[2], 27);
}

}  // namespace
}  // namespace tq::engine
