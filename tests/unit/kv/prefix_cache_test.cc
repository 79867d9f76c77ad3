// PrefixCache on a real RAM page store: chains of entries, lookup along a prefix, LRU eviction of leaves under the
// byte budget (never a parent before its children, never a pinned entry), erasing a subtree, and the references
// the cache holds on the store's pages.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <vector>

#include "engine/kv/page_store.h"
#include "engine/kv/prefix_cache.h"
#include "tests/unit/storage/storage_test_util.h"

namespace tq::engine {
namespace {

using Clock = PrefixCache::Clock;
constexpr uint32_t kPageBytes = 1024;
constexpr int kLayers = 2, kHeads = 1;  // two pages per entry

class PrefixCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KvStoreOptions o;
    o.hot_bytes = 1 << 20;
    o.warm_bytes = 0;
    auto s = KvPageStore::Open(o, {kPageBytes, 0, 0});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }

  // An entry's pages: stored, then handed to the cache (which retains them); the test's own references dropped.
  // Returns their ids.
  std::vector<PageId> Add(PrefixCache& cache, uint64_t hash, uint64_t parent, uint32_t index,
                          Clock::time_point t) {
    std::vector<PageId> pages;
    for (int i = 0; i < kLayers * kHeads; ++i) {
      auto id = store_->Store(PrecisionClass::kHot, std::vector<uint8_t>(kPageBytes, static_cast<uint8_t>(i)));
      EXPECT_TRUE(id.ok()) << id.status().ToString();
      if (!id.ok()) return pages;
      pages.push_back(*id);
    }
    cache.Insert(hash, parent, index, pages, std::vector<HeadTransform>(pages.size()), t);
    for (PageId id : pages) store_->Release(id);
    return pages;
  }

  uint64_t StoredPages() { return store_->Stats().tiers[0].pages; }

  std::unique_ptr<KvPageStore> store_;
  const Clock::time_point t0_ = Clock::now();
};

TEST(SaltedRootTest, SaltsSeedDisjointChains) {
  const uint64_t fp = 0x1234;
  EXPECT_EQ(SaltedRoot(fp, ""), fp);
  const uint64_t a = SaltedRoot(fp, "tenant-a"), b = SaltedRoot(fp, "tenant-b");
  EXPECT_NE(a, fp);
  EXPECT_NE(a, b);
  EXPECT_EQ(a, SaltedRoot(fp, "tenant-a"));  // stable: the same name after a restart
  EXPECT_NE(SaltedRoot(fp + 1, "tenant-a"), a);
  const std::vector<int32_t> page(128, 7);
  EXPECT_NE(PrefixHash(a, page), PrefixHash(fp, page));
  for (uint64_t bit = 0; bit < 64; ++bit) {  // every bit of the parent matters
    EXPECT_NE(PrefixHash(fp ^ (uint64_t{1} << bit), page), PrefixHash(fp, page)) << bit;
  }
}

TEST_F(PrefixCacheTest, LookupFollowsTheChainAndStopsAtTheFirstMiss) {
  PrefixCache cache(store_.get(), kLayers, kHeads, 1 << 20, 0.0);
  Add(cache, 11, 7, 0, t0_);
  Add(cache, 12, 11, 1, t0_);
  Add(cache, 13, 12, 2, t0_);
  Add(cache, 99, 55, 1, t0_);  // its parent is absent: not reachable, not added
  EXPECT_FALSE(cache.Contains(99));
  const uint64_t chain[] = {11, 12, 13, 14};
  EXPECT_EQ(cache.Lookup(chain, t0_).size(), 3u);
  const uint64_t other[] = {11, 42, 13};
  EXPECT_EQ(cache.Lookup(other, t0_).size(), 1u);
  EXPECT_EQ(cache.stats().entries, 3u);
  EXPECT_EQ(StoredPages(), 6u);  // the cache's references keep the pages
}

TEST_F(PrefixCacheTest, EvictsTheLeastRecentlyUsedLeafFirst) {
  // Budget for three entries (2 pages of 1 KiB each).
  PrefixCache cache(store_.get(), kLayers, kHeads, 3 * 2 * kPageBytes, 0.0);
  using std::chrono::seconds;
  Add(cache, 1, 7, 0, t0_);                // root A
  Add(cache, 2, 1, 1, t0_ + seconds(1));   // A's child
  Add(cache, 3, 7, 0, t0_ + seconds(2));   // root B
  const uint64_t a[] = {1, 2};
  cache.Lookup(a, t0_ + seconds(3));       // A's chain used last: B is the oldest leaf
  Add(cache, 4, 2, 2, t0_ + seconds(4));   // over budget: B goes, not A (a parent) nor A's child (newer)
  EXPECT_FALSE(cache.Contains(3));
  EXPECT_TRUE(cache.Contains(1) && cache.Contains(2) && cache.Contains(4));
  EXPECT_EQ(cache.stats().evictions, 1u);
  // Evicting down the chain takes leaves only: 4, then 2, then 1.
  EXPECT_TRUE(cache.EvictOne(t0_ + seconds(5)));
  EXPECT_FALSE(cache.Contains(4));
  EXPECT_TRUE(cache.Contains(2));
  EXPECT_TRUE(cache.EvictOne(t0_ + seconds(5)));
  EXPECT_TRUE(cache.EvictOne(t0_ + seconds(5)));
  EXPECT_FALSE(cache.EvictOne(t0_ + seconds(5)));
  EXPECT_EQ(cache.stats().entries, 0u);
  EXPECT_EQ(cache.stats().bytes, 0u);
  EXPECT_EQ(StoredPages(), 0u);  // every page released
}

TEST_F(PrefixCacheTest, PinnedEntriesAreNotEvicted) {
  PrefixCache cache(store_.get(), kLayers, kHeads, 1 << 20, /*pin_seconds=*/10.0);
  Add(cache, 1, 7, 0, t0_);
  EXPECT_FALSE(cache.EvictOne(t0_ + std::chrono::seconds(5)));
  EXPECT_TRUE(cache.EvictOne(t0_ + std::chrono::seconds(11)));
}

TEST_F(PrefixCacheTest, EraseDropsTheEntryAndEverythingThatExtendsIt) {
  PrefixCache cache(store_.get(), kLayers, kHeads, 1 << 20, 0.0);
  Add(cache, 1, 7, 0, t0_);
  Add(cache, 2, 1, 1, t0_);
  Add(cache, 3, 2, 2, t0_);
  Add(cache, 4, 2, 2, t0_);  // a second continuation of 2
  Add(cache, 5, 1, 1, t0_);  // a sibling of 2
  cache.Erase(2);
  EXPECT_FALSE(cache.Contains(2) || cache.Contains(3) || cache.Contains(4));
  EXPECT_TRUE(cache.Contains(1) && cache.Contains(5));
  EXPECT_EQ(StoredPages(), 4u);
  // 1 still has a child (5): 5 is evicted before 1.
  EXPECT_TRUE(cache.EvictOne(t0_));
  EXPECT_FALSE(cache.Contains(5));
  EXPECT_TRUE(cache.Contains(1));
}

// Demotion moves the shallowest pages first: a crash part-way through leaves the first pages of the prefixes on
// disk, which a restart can reuse (an entry is recovered only with its whole chain back to page 0), rather than
// later pages whose beginnings were still in RAM.
TEST_F(PrefixCacheTest, DemotionWritesTheFirstPagesOfEveryPrefixFirst) {
  storage::testing::TempDir dir;
  KvStoreOptions o;
  o.hot_bytes = 1 << 20;
  o.warm_bytes = 0;
  o.cold_dir = dir.path();
  o.cold_bytes = 64 << 20;
  auto s = KvPageStore::Open(o, {kPageBytes, 0, 0});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  store_ = std::move(*s);
  PrefixCache cache(store_.get(), kLayers, kHeads, 1 << 20, 0.0);
  // Two chains of three pages each, as requests insert them (each page after its parent).
  std::vector<std::vector<PageId>> deep, first;
  for (uint64_t chain : {100u, 200u}) {
    first.push_back(Add(cache, chain, 1, 0, t0_));
    deep.push_back(Add(cache, chain + 1, chain, 1, t0_));
    deep.push_back(Add(cache, chain + 2, chain + 1, 2, t0_));
  }
  // Room for the two page-0 entries (two pages each) only.
  EXPECT_EQ(cache.Demote(4), 4u);
  store_->FlushCold();
  for (const auto& pages : first) {
    for (PageId id : pages) EXPECT_EQ(store_->RamBytes(id), nullptr) << "page-0 page " << Raw(id) << " still in RAM";
  }
  for (const auto& pages : deep) {
    for (PageId id : pages) EXPECT_NE(store_->RamBytes(id), nullptr) << "deeper page " << Raw(id) << " moved first";
  }
}

}  // namespace
}  // namespace tq::engine
