// The /v1/responses store (server/response_store.h): bounded by count and bytes (least recently used out first),
// entries expire after the TTL, Get refreshes, Erase drops, and the stats count what was evicted. Time is stepped
// through the `now` arguments.
#include "server/response_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace tq::server {
namespace {

using Clock = ResponseStore::Clock;

StoredResponse Make(const std::string& id, size_t payload = 10) {
  StoredResponse r;
  r.id = id;
  r.response_json = std::string(payload, 'x');
  r.conversation = {{"user", "hello"}, {"assistant", "hi"}};
  return r;
}

TEST(ResponseStoreTest, CountBoundEvictsTheLeastRecentlyUsed) {
  ResponseStore s(2, 1 << 20, 3600);
  const Clock::time_point t0 = Clock::now();
  ASSERT_TRUE(s.Put(Make("a"), t0));
  ASSERT_TRUE(s.Put(Make("b"), t0));
  ASSERT_TRUE(s.Get("a", t0).has_value());  // a is now the most recent
  ASSERT_TRUE(s.Put(Make("c"), t0));
  EXPECT_TRUE(s.Get("a", t0).has_value());
  EXPECT_FALSE(s.Get("b", t0).has_value());
  EXPECT_TRUE(s.Get("c", t0).has_value());
  EXPECT_EQ(s.Stats().entries, 2u);
  EXPECT_EQ(s.Stats().evicted_total, 1u);
}

TEST(ResponseStoreTest, ByteBoundAndOversizedEntries) {
  ResponseStore s(100, 3000, 3600);
  const Clock::time_point t0 = Clock::now();
  ASSERT_TRUE(s.Put(Make("a", 1000), t0));
  ASSERT_TRUE(s.Put(Make("b", 1000), t0));
  ASSERT_TRUE(s.Put(Make("c", 1000), t0));  // over 3000 with its overhead: a goes
  EXPECT_FALSE(s.Get("a", t0).has_value());
  EXPECT_LE(s.Stats().bytes, 3000u);
  EXPECT_FALSE(s.Put(Make("huge", 10000), t0));  // larger than the whole store: not kept
  EXPECT_FALSE(s.Get("huge", t0).has_value());
}

TEST(ResponseStoreTest, EntriesExpireAfterTheTtl) {
  ResponseStore s(10, 1 << 20, 60);
  const Clock::time_point t0 = Clock::now();
  ASSERT_TRUE(s.Put(Make("a"), t0));
  EXPECT_TRUE(s.Get("a", t0 + std::chrono::seconds(59)).has_value());
  EXPECT_FALSE(s.Get("a", t0 + std::chrono::seconds(61)).has_value());
  EXPECT_EQ(s.Stats().entries, 0u);
  EXPECT_EQ(s.Stats().evicted_total, 1u);
}

TEST(ResponseStoreTest, EraseReplaceAndDisabled) {
  ResponseStore s(10, 1 << 20, 60);
  ASSERT_TRUE(s.Put(Make("a")));
  StoredResponse again = Make("a", 50);
  ASSERT_TRUE(s.Put(again));
  EXPECT_EQ(s.Stats().entries, 1u);
  EXPECT_EQ(s.Get("a")->response_json.size(), 50u);
  EXPECT_TRUE(s.Erase("a"));
  EXPECT_FALSE(s.Erase("a"));
  EXPECT_EQ(s.Stats().bytes, 0u);
  ResponseStore off(0, 1 << 20, 60);
  EXPECT_FALSE(off.enabled());
  EXPECT_FALSE(off.Put(Make("a")));
}

}  // namespace
}  // namespace tq::server
