// The prefix cache's eviction policy on stepped time (no clock is read): LRU picks the oldest use, never an entry
// used within the pin, follows uses and removals; and the cache evicts in whatever order its policy says.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <set>
#include <vector>

#include "engine/kv/eviction.h"
#include "engine/kv/page_store.h"
#include "engine/kv/prefix_cache.h"

namespace tq::engine {
namespace {

using Clock = EvictionPolicy::Clock;
using std::chrono::seconds;

TEST(LruPolicyTest, OldestUseFirstAndNeverAPinnedOne) {
  auto lru = MakeLruPolicy();
  EXPECT_EQ(lru->name(), "lru");
  const Clock::time_point t0{};
  EXPECT_EQ(lru->Victim(t0, seconds(0)), std::nullopt);
  lru->Add(1, t0);
  lru->Add(2, t0 + seconds(1));
  lru->Add(3, t0 + seconds(2));
  EXPECT_EQ(lru->Victim(t0 + seconds(3), seconds(0)), 1u);
  lru->Use(1, t0, t0 + seconds(4));  // 1 is now the newest
  EXPECT_EQ(lru->Victim(t0 + seconds(4), seconds(0)), 2u);
  // Pinned for 5 s: at t0+5 entry 2 (used at t0+1) is still pinned; at t0+6 it may go.
  EXPECT_EQ(lru->Victim(t0 + seconds(5), seconds(5)), std::nullopt);
  EXPECT_EQ(lru->Victim(t0 + seconds(6), seconds(5)), 2u);
  lru->Remove(2, t0 + seconds(1));
  EXPECT_EQ(lru->Victim(t0 + seconds(6), seconds(0)), 3u);
  lru->Remove(3, t0 + seconds(2));
  lru->Remove(1, t0 + seconds(4));
  EXPECT_EQ(lru->Victim(t0 + seconds(100), seconds(0)), std::nullopt);
}

// A policy that evicts the newest entry first and records what it was offered.
class NewestFirst final : public EvictionPolicy {
 public:
  explicit NewestFirst(std::set<uint64_t>* offered) : offered_(offered) {}
  std::string_view name() const override { return "newest-first"; }
  void Add(uint64_t key, Clock::time_point t) override {
    order_.insert({t, key});
    offered_->insert(key);
  }
  void Remove(uint64_t key, Clock::time_point t) override { order_.erase({t, key}); }
  void Use(uint64_t key, Clock::time_point before, Clock::time_point now) override {
    order_.erase({before, key});
    order_.insert({now, key});
  }
  std::optional<uint64_t> Victim(Clock::time_point, Clock::duration) const override {
    if (order_.empty()) return std::nullopt;
    return order_.rbegin()->second;
  }

 private:
  std::set<std::pair<Clock::time_point, uint64_t>> order_;
  std::set<uint64_t>* offered_;
};

TEST(PrefixCachePolicyTest, TheCacheEvictsInThePolicysOrderAndOffersOnlyLeaves) {
  KvStoreOptions o;
  o.hot_bytes = 1 << 20;
  o.warm_bytes = 0;
  constexpr uint32_t kPageBytes = 1024;
  auto store = KvPageStore::Open(o, {kPageBytes, 0, 0});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  std::set<uint64_t> offered;
  // Budget: two entries of one page each.
  PrefixCache cache(store->get(), 1, 1, 2 * kPageBytes, 0.0, std::make_unique<NewestFirst>(&offered));
  const Clock::time_point t0{};
  auto add = [&](uint64_t hash, uint64_t parent, uint32_t index, Clock::time_point t) {
    auto id = (*store)->Store(PrecisionClass::kHot, std::vector<uint8_t>(kPageBytes, 1));
    ASSERT_TRUE(id.ok());
    cache.Insert(hash, parent, index, {*id}, std::vector<HeadTransform>(1), t);
    (*store)->Release(*id);
  };
  add(10, 7, 0, t0);
  add(20, 7, 0, t0 + seconds(1));
  add(30, 7, 0, t0 + seconds(2));  // over budget: the newest (30 itself) goes, where LRU would drop 10
  EXPECT_TRUE(cache.Contains(10));
  EXPECT_TRUE(cache.Contains(20));
  EXPECT_FALSE(cache.Contains(30));
  // 11 extends 10: 10 is no leaf any more; the over-budget insert evicts the newest leaf (11), never 10.
  add(11, 10, 1, t0 + seconds(3));
  EXPECT_TRUE(cache.Contains(10));
  EXPECT_FALSE(cache.Contains(11));
  EXPECT_EQ(offered, (std::set<uint64_t>{10, 11, 20, 30}));
}

}  // namespace
}  // namespace tq::engine
