// ColdReadAhead against a model of layers made of equal pages: what it requests, in what order, and that it
// keeps within its budget.
#include "engine/kv/read_ahead.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace tq::engine {
namespace {

// Layers of `pages` pages of `page_bytes` each; a request takes whole pages up to its limit, like
// KvPageStore::Prefetch. Records each request.
struct Layers {
  int pages;
  uint64_t page_bytes;
  struct Call {
    int i;
    uint64_t limit;
  };
  std::vector<Call> calls;
  std::vector<uint64_t> requested;  // bytes per layer index actually requested, over all calls

  ColdReadAhead::Issue Issue() {
    return [this](int i, uint64_t limit) {
      calls.push_back({i, limit});
      if (requested.size() <= static_cast<size_t>(i)) requested.resize(i + 1, 0);
      const uint64_t all = pages * page_bytes;
      const uint64_t bytes = std::min<uint64_t>(all, limit / page_bytes * page_bytes);
      requested[i] = std::max(requested[i], bytes);
      return KvPageStore::PrefetchResult{bytes, bytes == all};
    };
  }
};

TEST(ColdReadAheadTest, NoBudgetRequestsNothing) {
  Layers m{4, 100, {}, {}};
  ColdReadAhead ahead(3, 0, m.Issue());
  ahead.Start();
  for (int l = 0; l < 3; ++l) {
    ahead.BeforeLayer(l);
    ahead.AfterLayer(l);
  }
  EXPECT_TRUE(m.calls.empty());
}

TEST(ColdReadAheadTest, StartFillsTheBudgetEndingWithPartOfALayer) {
  Layers m{4, 100, {}, {}};  // 400 bytes a layer
  ColdReadAhead ahead(4, 1000, m.Issue());
  ahead.Start();
  // Layers 0 and 1 whole (800), then 200 bytes of layer 2.
  ASSERT_EQ(m.calls.size(), 3u);
  EXPECT_TRUE(ahead.whole(0));
  EXPECT_TRUE(ahead.whole(1));
  EXPECT_FALSE(ahead.whole(2));
  EXPECT_EQ(ahead.taken(2), 200u);
  EXPECT_EQ(ahead.ahead_bytes(), 1000u);
  EXPECT_EQ(ahead.next(), 2);
}

TEST(ColdReadAheadTest, ALayerTakenWholeIsNotRequestedAgain) {
  Layers m{4, 100, {}, {}};
  ColdReadAhead ahead(4, 1000, m.Issue());
  ahead.Start();
  const size_t after_start = m.calls.size();
  ahead.BeforeLayer(0);  // layer 0 whole already; the budget is full: nothing to do
  EXPECT_EQ(m.calls.size(), after_start);
  ahead.AfterLayer(0);
  EXPECT_EQ(ahead.ahead_bytes(), 600u);
  ahead.BeforeLayer(1);  // layer 1 whole; the rest of layer 2 (200), then 200 of layer 3
  for (size_t c = after_start; c < m.calls.size(); ++c) EXPECT_NE(m.calls[c].i, 1);
  EXPECT_TRUE(ahead.whole(2));
  EXPECT_EQ(ahead.taken(3), 200u);
  EXPECT_EQ(ahead.ahead_bytes(), 1000u);
}

TEST(ColdReadAheadTest, TheLayerAboutToBeAttendedIsTakenWholeBeyondTheBudget) {
  Layers m{10, 100, {}, {}};  // 1000 bytes a layer, budget 300
  ColdReadAhead ahead(2, 300, m.Issue());
  ahead.Start();
  EXPECT_EQ(ahead.taken(0), 300u);
  ahead.BeforeLayer(0);
  EXPECT_TRUE(ahead.whole(0));
  EXPECT_EQ(ahead.ahead_bytes(), 1000u);  // over budget: nothing more is read ahead
  EXPECT_EQ(ahead.taken(1), 0u);
  ahead.AfterLayer(0);
  EXPECT_EQ(ahead.ahead_bytes(), 0u);
}

TEST(ColdReadAheadTest, ItWrapsIntoTheNextStepButNotPastTheLayerAttended) {
  Layers m{1, 100, {}, {}};  // 100 bytes a layer, 3 layers, budget 250
  ColdReadAhead ahead(3, 250, m.Issue());
  ahead.Start();  // 0, 1, and part of 2: a 100-byte layer cannot be split in 50
  EXPECT_EQ(ahead.next(), 2);
  for (int l = 0; l < 3; ++l) {
    ahead.BeforeLayer(l);
    // Never the next step's layer l or later while this step's layer l is being attended.
    for (const auto& c : m.calls) {
      if (c.i >= 3) {
        EXPECT_LT(c.i - 3, l);
      }
    }
    ahead.AfterLayer(l);
  }
  // At the last layer, layer 2 and the next step's layer 0 (index 3) filled the budget; after it, only the
  // next step's layer 0 is ahead.
  EXPECT_TRUE(ahead.whole(3));
  EXPECT_FALSE(ahead.whole(4));
  EXPECT_EQ(ahead.ahead_bytes(), 100u);
}

TEST(ColdReadAheadTest, EveryLayerIsRequestedWholeOnceAndTheBudgetHolds) {
  for (uint64_t budget : {50u, 150u, 399u, 400u, 1234u, 100000u}) {
    Layers m{4, 100, {}, {}};
    const int n = 5;
    ColdReadAhead ahead(n, budget, m.Issue());
    ahead.Start();
    for (int l = 0; l < n; ++l) {
      ahead.BeforeLayer(l);
      EXPECT_TRUE(ahead.whole(l)) << budget;
      // Beyond the layer being attended, read-ahead stays within the budget (plus less than a page).
      EXPECT_LE(ahead.ahead_bytes() - ahead.taken(l), budget + 100) << budget;
      ahead.AfterLayer(l);
    }
    for (int l = 0; l < n; ++l) EXPECT_EQ(m.requested[l], 400u) << budget;
    int whole_requests = 0;
    for (const auto& c : m.calls) whole_requests += c.limit == UINT64_MAX ? 1 : 0;
    EXPECT_LE(whole_requests, n) << budget;  // at most one unbounded request per layer
  }
}

}  // namespace
}  // namespace tq::engine
