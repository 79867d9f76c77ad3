// The GPU machine's tier map on the shared page store, host side: HOT pages in a device pool (here host memory the
// CPU may not read in place, as HBM), ACTIVE pages in a pinned host pool (here plain host memory), SPARSE pages on
// disk, under one page table with the store's fallbacks, pins, moves to disk and stats.
#include <gtest/gtest.h>

#include "engine/gpu/slab_page_tier.h"
#include "engine/kv/page_record.h"
#include "engine/kv/page_store.h"
#include "storage/page_format.h"
#include "tests/unit/gpu_model/copied_host_memory.h"
#include "tests/unit/kv/page_test_util.h"
#include "tests/unit/storage/storage_test_util.h"

namespace tq::gpu {
namespace {

using engine::KvPageStore;
using engine::KvTier;
using engine::PageId;
using engine::PrecisionClass;

using engine::testing::Bytes;
using engine::testing::kActivePage;
using engine::testing::kHotPage;
using engine::testing::kSparsePage;

class GpuTiersTest : public ::testing::Test {
 protected:
  // Room for `hot` and `warm` pages of the largest page, and 8 cold ones.
  std::unique_ptr<KvPageStore> Open(uint64_t hot, uint64_t warm) {
    engine::KvStoreOptions o;
    o.hot_bytes = hot * SlotStride(kHotPage);
    o.warm_bytes = warm * SlotStride(kHotPage);
    o.cold_dir = dir_.path();
    o.cold_bytes = 8 * storage::PageIoBytes(engine::RecordBytes(0) + kHotPage);
    o.io_backend = "pread";
    KvPageStore::TierMaker gpu_tiers = [this](KvTier kind, uint64_t budget, uint32_t slot_bytes, bool)
        -> StatusOr<std::unique_ptr<engine::PageTier>> {
      std::shared_ptr<SlabMemory> memory =
          kind == KvTier::kHot ? std::shared_ptr<SlabMemory>(std::make_shared<testing::CopiedHostMemory>())
                               : HostMemory();
      TQ_ASSIGN_OR_RETURN(std::unique_ptr<SlabPageTier> t, SlabPageTier::Open(kind, memory, budget, slot_bytes));
      (kind == KvTier::kHot ? hot_ : warm_) = t.get();
      return std::unique_ptr<engine::PageTier>(std::move(t));
    };
    auto s = KvPageStore::Open(o, {kHotPage, kActivePage, kSparsePage}, gpu_tiers);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }

  storage::testing::TempDir dir_;
  SlabPageTier* hot_ = nullptr;
  SlabPageTier* warm_ = nullptr;
};

TEST_F(GpuTiersTest, ClassesLandInDevicePinnedAndDiskTiersOfOnePageTable) {
  auto s = Open(2, 2);
  ASSERT_NE(s, nullptr);
  ASSERT_NE(hot_, nullptr);
  ASSERT_NE(warm_, nullptr);
  EXPECT_EQ(s->home(PrecisionClass::kHot), KvTier::kHot);
  EXPECT_EQ(s->home(PrecisionClass::kActive), KvTier::kWarm);
  EXPECT_EQ(s->home(PrecisionClass::kSparse), KvTier::kCold);
  const auto hot = Bytes(1, kHotPage), active = Bytes(2, kActivePage), sparse = Bytes(3, kSparsePage);
  auto h = s->Store(PrecisionClass::kHot, hot);
  auto a = s->Store(PrecisionClass::kActive, active);
  auto c = s->Store(PrecisionClass::kSparse, sparse);
  ASSERT_TRUE(h.ok() && a.ok() && c.ok());
  // The device page is not host memory: the kernels read it at its address, the CPU through a copy.
  EXPECT_EQ(s->RamBytes(*h), nullptr);
  EXPECT_NE(hot_->Address(*h), nullptr);
  EXPECT_EQ(s->RamBytes(*a), warm_->Address(*a)) << "pinned pages are read in place";
  EXPECT_EQ(s->TierOf(*h), KvTier::kHot);
  EXPECT_EQ(s->TierOf(*a), KvTier::kWarm);
  EXPECT_EQ(s->TierOf(*c), KvTier::kCold);
  EXPECT_EQ(s->Address(*h), hot_->Address(*h)) << "the device address the kernels read";
  EXPECT_EQ(s->Address(*a), s->RamBytes(*a));
  EXPECT_EQ(s->Address(*c), nullptr) << "a page on disk has no address";
  s->FlushCold();
  EXPECT_EQ(engine::testing::ReadPage(*s, *h, hot.size()), hot);
  EXPECT_EQ(engine::testing::ReadPage(*s, *a, active.size()), active);
  EXPECT_EQ(engine::testing::ReadPage(*s, *c, sparse.size()), sparse);
  const engine::KvStoreStats st = s->Stats();
  EXPECT_EQ(st.tiers[0].pages, 1u);
  EXPECT_EQ(st.tiers[1].pages, 1u);
  EXPECT_EQ(st.tiers[2].pages, 1u);
  EXPECT_EQ(st.tiers[0].io.writes, 1u);
  EXPECT_NE(s->Describe().find("(copied host)"), std::string::npos) << s->Describe();
  s->Release(*h);
  EXPECT_EQ(hot_->Address(*h), nullptr);
  EXPECT_EQ(hot_->pool().used_slots(), 0);
}

// ACTIVE pages fall back from the pinned pool to the device pool (whose slots hold every class); HOT pages do not
// fall back to the pinned pool, whose slots are sized for ACTIVE pages.
TEST_F(GpuTiersTest, AFullPinnedPoolFallsBackToTheDevicePoolThenRefuses) {
  auto s = Open(1, 1);
  ASSERT_NE(s, nullptr);
  auto first = s->Store(PrecisionClass::kActive, Bytes(1, kActivePage));
  auto second = s->Store(PrecisionClass::kActive, Bytes(2, kActivePage));
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(s->TierOf(*first), KvTier::kWarm);
  EXPECT_EQ(s->TierOf(*second), KvTier::kHot);
  EXPECT_EQ(engine::testing::ReadPage(*s, *second, kActivePage), Bytes(2, kActivePage));
  EXPECT_EQ(s->Store(PrecisionClass::kActive, Bytes(3, kActivePage)).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(s->Store(PrecisionClass::kHot, Bytes(4, kHotPage)).status().code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(s->Fits({0, 1, 0}));
  s->Release(*first);
  EXPECT_TRUE(s->Fits({0, 1, 0}));
  EXPECT_FALSE(s->Fits({1, 0, 0}));
  s->Release(*second);
  EXPECT_TRUE(s->Fits({1, 0, 0}));
}

// The GPU encoder fills pages where they lie: a HOT page's slot is device memory, an ACTIVE one's pinned memory the
// CPU reads in place; a SPARSE page cannot be allocated on disk and falls back to the pinned pool.
TEST_F(GpuTiersTest, AllocatedPagesLieWhereTheEncoderWritesThem) {
  auto s = Open(2, 2);
  ASSERT_NE(s, nullptr);
  auto h = s->Allocate(PrecisionClass::kHot, kHotPage);
  auto a = s->Allocate(PrecisionClass::kActive, kActivePage);
  auto c = s->Allocate(PrecisionClass::kSparse, kSparsePage);
  ASSERT_TRUE(h.ok() && a.ok() && c.ok());
  EXPECT_EQ(h->tier, KvTier::kHot);
  EXPECT_EQ(h->at, hot_->Address(h->id));
  EXPECT_EQ(s->RamBytes(h->id), nullptr);
  EXPECT_EQ(a->tier, KvTier::kWarm);
  EXPECT_EQ(s->RamBytes(a->id), a->at);
  EXPECT_EQ(c->tier, KvTier::kWarm);
  EXPECT_EQ(s->Stats().fallbacks, 1u);
  const auto bytes = Bytes(5, kHotPage);
  ASSERT_TRUE(hot_->pool().memory().CopyIn(h->at, bytes.data(), bytes.size()).ok());
  EXPECT_EQ(engine::testing::ReadPage(*s, h->id, bytes.size()), bytes);
  EXPECT_EQ(s->Stats().tiers[0].pages, 1u);
  EXPECT_EQ(s->Stats().tiers[1].pages, 2u);
  EXPECT_EQ(s->Allocate(PrecisionClass::kHot, kHotPage + 1).status().code(), StatusCode::kResourceExhausted);
}

TEST_F(GpuTiersTest, ADevicePageMovesToDiskThroughACopyAndReadsBack) {
  auto s = Open(2, 2);
  ASSERT_NE(s, nullptr);
  const auto bytes = Bytes(7, kHotPage);
  auto id = s->Store(PrecisionClass::kHot, bytes);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(s->MoveToCold(*id));
  EXPECT_EQ(s->TierOf(*id), KvTier::kCold);
  EXPECT_EQ(hot_->pool().used_slots(), 0) << "the device slot is free again";
  s->FlushCold();
  EXPECT_EQ(engine::testing::ReadPage(*s, *id, bytes.size()), bytes);
  EXPECT_FALSE(s->MoveToCold(*id)) << "already on disk";
}

}  // namespace
}  // namespace tq::gpu
