// OnlineAdapter: ranking by the skipped share over a sliding window, paired moves, hysteresis, HOT heads fixed.
#include "engine/kv/adaptation.h"

#include <gtest/gtest.h>

#include <thread>

namespace tq::engine {
namespace {

using PC = PrecisionClass;

// 1 layer x 10 heads: head 0 HOT, heads 1-5 ACTIVE, 6-9 SPARSE.
std::vector<PC> Start() {
  std::vector<PC> c(10, PC::kSparse);
  c[0] = PC::kHot;
  for (int i = 1; i <= 5; ++i) c[i] = PC::kActive;
  return c;
}

// One step in which head i skipped share[i] of 1000 scored pairs.
void Step(OnlineAdapter& a, const std::vector<double>& share) {
  std::vector<int64_t> scored(share.size(), 1000), skipped(share.size());
  for (size_t i = 0; i < share.size(); ++i) skipped[i] = static_cast<int64_t>(share[i] * 1000);
  a.EndStep(scored, skipped);
}

TEST(OnlineAdapterTest, AConcentratedSparseHeadSwapsWithADiffuseActiveOneAfterTwoDecisions) {
  AdaptationOptions o;
  o.window = 4;
  o.every = 4;
  o.margin = 1;
  OnlineAdapter a(1, 10, Start(), o);
  // Head 9 (SPARSE) is the most concentrated, head 1 (ACTIVE) the least; the rest keep their order.
  const std::vector<double> share = {0.99, 0.05, 0.8, 0.79, 0.78, 0.77, 0.3, 0.29, 0.28, 0.95};
  for (int s = 0; s < 4; ++s) Step(a, share);
  EXPECT_TRUE(a.Decide().empty());  // wanted once: not yet
  for (int s = 0; s < 4; ++s) Step(a, share);
  const std::vector<ClassChange> moves = a.Decide();
  ASSERT_EQ(moves.size(), 2u);
  EXPECT_EQ(moves[0].kv_head, 9);
  EXPECT_EQ(moves[0].to, PC::kActive);
  EXPECT_EQ(moves[1].kv_head, 1);
  EXPECT_EQ(moves[1].to, PC::kSparse);
  EXPECT_EQ(a.classes()[9], PC::kActive);
  EXPECT_EQ(a.classes()[1], PC::kSparse);
  EXPECT_EQ(a.classes()[0], PC::kHot);  // the most concentrated of all, but HOT never moves
  // The classes now match the ranking: nothing more moves.
  for (int round = 0; round < 3; ++round) {
    for (int s = 0; s < 4; ++s) Step(a, share);
    EXPECT_TRUE(a.Decide().empty());
  }
  EXPECT_EQ(a.moves(), 2u);
}

TEST(OnlineAdapterTest, HeadsNearTheBoundaryDoNotFlap) {
  AdaptationOptions o;
  o.window = 2;
  o.every = 2;
  o.margin = 2;
  OnlineAdapter a(1, 10, Start(), o);
  // Heads 5 (ACTIVE) and 6 (SPARSE) trade places every window, but only across the boundary by one rank.
  for (int round = 0; round < 10; ++round) {
    std::vector<double> share = {0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05};
    if (round % 2 == 1) std::swap(share[5], share[6]);
    for (int s = 0; s < 2; ++s) Step(a, share);
    EXPECT_TRUE(a.Decide().empty()) << round;
  }
}

TEST(OnlineAdapterTest, TheWindowForgetsOldSteps) {
  AdaptationOptions o;
  o.window = 3;
  o.every = 1;
  OnlineAdapter a(1, 10, Start(), o);
  std::vector<double> share(10, 0.5);
  share[9] = 1.0;
  for (int s = 0; s < 3; ++s) Step(a, share);
  EXPECT_DOUBLE_EQ(a.Scores()[9], 1.0);
  share[9] = 0.0;
  for (int s = 0; s < 3; ++s) Step(a, share);
  EXPECT_DOUBLE_EQ(a.Scores()[9], 0.0);
  // A head that never attended has no score.
  std::vector<int64_t> scored(10, 1000), skipped(10, 500);
  scored[3] = 0;
  skipped[3] = 0;
  for (int s = 0; s < 3; ++s) a.EndStep(scored, skipped);
  EXPECT_EQ(a.Scores()[3], -1.0);
}

TEST(HeadActivityTest, CountsFromManyThreadsAndResetsOnTake) {
  HeadActivity act(2, 3);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) act.Add(1, 2, 10, 3);
    });
  }
  for (auto& t : threads) t.join();
  std::vector<int64_t> scored, skipped;
  act.Take(&scored, &skipped);
  EXPECT_EQ(scored[5], 40000);
  EXPECT_EQ(skipped[5], 12000);
  act.Take(&scored, &skipped);
  EXPECT_EQ(scored[5], 0);
}

}  // namespace
}  // namespace tq::engine
