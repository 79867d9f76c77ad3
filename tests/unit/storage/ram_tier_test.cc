#include "storage/ram_tier.h"

#include <gtest/gtest.h>

#include <cstring>

#include "storage_test_util.h"

namespace tq::storage {
namespace {

using testing::PageBytes;

TEST(RamTier, PutGetReadEraseWithinBudget) {
  StatusOr<std::unique_ptr<RamTier>> opened = RamTier::Open({"hot", 10 * 4096, 4000, false});
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  RamTier& tier = **opened;
  EXPECT_EQ(tier.slot_bytes(), 4032u);
  EXPECT_EQ(tier.slot_count(), 10u);
  for (uint64_t id = 0; id < 10; ++id) ASSERT_TRUE(tier.Put(id, PageBytes(id, 100 + id)).ok());
  EXPECT_EQ(tier.Put(10, PageBytes(10, 1)).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(tier.stats().errors(TierError::kOverBudget), 1u);
  EXPECT_TRUE(tier.Put(3, PageBytes(33, 50)).ok());  // replacing needs no new slot
  std::optional<std::span<const std::byte>> view = tier.Get(3);
  ASSERT_TRUE(view.has_value());
  ASSERT_EQ(view->size(), 50u);
  EXPECT_EQ(std::memcmp(view->data(), PageBytes(33, 50).data(), 50), 0);
  std::vector<std::byte> out(4000);
  ASSERT_EQ(tier.Read(7, out).value_or(0), 107u);
  EXPECT_EQ(std::memcmp(out.data(), PageBytes(7, 107).data(), 107), 0);
  EXPECT_EQ(tier.Put(11, PageBytes(0, 4001)).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(tier.Erase(7).ok());
  EXPECT_EQ(tier.Erase(7).code(), StatusCode::kNotFound);
  EXPECT_EQ(tier.Read(7, out).status().code(), StatusCode::kNotFound);
  StatusOr<std::span<std::byte>> slot = tier.Allocate(10, 8);
  ASSERT_TRUE(slot.ok());
  std::memset(slot->data(), 0x5A, 8);
  EXPECT_EQ(tier.Get(10)->front(), std::byte{0x5A});
  TierStatsSnapshot s = tier.stats().Snapshot();
  EXPECT_EQ(s.pages, 10u);
  EXPECT_EQ(s.bytes_used, 10u * 4032);
  EXPECT_EQ(s.bytes_capacity, 10u * 4096);
  EXPECT_EQ(s.reads, 3u);
  EXPECT_EQ(s.read_latency_count, 0u);
}

TEST(RamTier, WarmTierLocksOrSaysWhyNot) {
  StatusOr<std::unique_ptr<RamTier>> opened = RamTier::Open({"warm", 1 << 20, 8192, true});
  ASSERT_TRUE(opened.ok());
  // Either outcome is valid (it depends on RLIMIT_MEMLOCK); the tier works both ways.
  std::printf("warm tier locked: %s\n", (*opened)->locked() ? "yes" : "no (RLIMIT_MEMLOCK)");
  EXPECT_TRUE((*opened)->Put(1, PageBytes(1, 8192)).ok());
  EXPECT_EQ(RamTier::Open({"warm", 100, 8192, true}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tq::storage
