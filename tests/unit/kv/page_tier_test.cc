// The PageTier contract, checked on each implementation: a RAM arena (hot, warm), the cold tier on a real
// directory through io_uring and the pread fallback, and the GPU machine's slot pools (engine/gpu/slab_page_tier.h)
// over host memory, read in place, and over host memory the CPU may not read in place, as device memory (the real
// device and pinned memories run in gpu_model_test where there is a GPU). What every tier must do (write from bytes, pin them back,
// free, count slots) runs on all; what only one kind does (in-place reads, records, recovery, failed writes) runs
// on that kind. FaultQueue injects the disk-full error a real disk cannot give on demand.
#include "engine/kv/page_tier.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "engine/gpu/slab_page_tier.h"
#include "engine/kv/cold_page_tier.h"
#include "engine/kv/page_record.h"
#include "engine/kv/ram_page_tier.h"
#include "tests/unit/gpu_model/copied_host_memory.h"
#include "storage/fault_queue.h"
#include "storage/page_format.h"
#include "tests/unit/kv/page_test_util.h"
#include "tests/unit/storage/storage_test_util.h"

namespace tq::engine {
namespace {

using testing::Bytes;
constexpr uint32_t kPage = testing::kSparsePage;
constexpr uint64_t kFingerprint = 0x5eed;

PageInfo Info(int layer, uint64_t prefix_hash) {
  PageInfo info;
  info.layer = layer;
  info.kv_head = 1;
  info.stream = 7;
  info.k = kernels::KvFormat::kTq4;
  info.v = kernels::KvFormat::kInt8;
  info.prefix_hash = prefix_hash;
  info.parent_hash = prefix_hash + 1;
  info.page_index = 3;
  return info;
}

// "ram", "cold:<io backend>", "slab:host" or "slab:copied".
class PageTierTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (cold()) TQ_SKIP_IF_NO_BACKEND(GetParam().substr(5));
  }
  bool cold() const { return GetParam().rfind("cold:", 0) == 0; }
  bool slab() const { return GetParam().rfind("slab:", 0) == 0; }
  // Whether Write returns the page in place.
  bool in_place() const { return !cold() && GetParam() != "slab:copied"; }

  // A tier with room for `pages` pages of kPage bytes (RAM: slots; cold: its 4 KiB slots).
  std::unique_ptr<PageTier> Open(uint64_t pages, storage::FaultQueue** fault = nullptr) {
    if (slab()) {
      std::shared_ptr<gpu::SlabMemory> memory =
          GetParam() == "slab:host" ? gpu::HostMemory() : std::make_shared<gpu::testing::CopiedHostMemory>();
      auto t = gpu::SlabPageTier::Open(KvTier::kWarm, memory, pages * gpu::SlotStride(kPage), kPage);
      EXPECT_TRUE(t.ok()) << t.status().ToString();
      return t.ok() ? std::move(*t) : nullptr;
    }
    if (!cold()) {
      auto t = RamPageTier::Open(KvTier::kWarm, pages * ((kPage + 63) / 64 * 64), kPage, false);
      EXPECT_TRUE(t.ok()) << t.status().ToString();
      return t.ok() ? std::move(*t) : nullptr;
    }
    KvStoreOptions o;
    o.cold_dir = dir_.path();
    o.cold_bytes = pages * storage::PageIoBytes(RecordBytes(0) + kPage);
    o.cold_cache_bytes = 1 << 20;
    o.io_backend = GetParam().substr(5);
    o.io_depth = 8;
    o.fingerprint = kFingerprint;
    o.head_dim = 64;
    if (fault != nullptr) {
      o.wrap_queue = [fault](std::unique_ptr<storage::IoQueue> inner) -> std::unique_ptr<storage::IoQueue> {
        auto q = std::make_unique<storage::FaultQueue>(std::move(inner), 7);
        *fault = q.get();
        return q;
      };
    }
    auto t = ColdPageTier::Open(o, kPage);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(*t) : nullptr;
  }

  static std::vector<PinnedPage> Pin(PageTier& t, std::span<const PageId> ids, std::span<const uint32_t> lengths,
                                     const PageInfo& info, Status* status) {
    std::vector<PageTier::PinRef> refs;
    for (size_t i = 0; i < ids.size(); ++i) refs.push_back({ids[i], t.StoredBytes(lengths[i], info), lengths[i]});
    std::vector<PinnedPage> out(ids.size());
    *status = t.Pin(refs, out);
    return out;
  }
  // One page of kPage bytes.
  static StatusOr<PinnedPage> PinOne(PageTier& t, PageId id, const PageInfo& info) {
    const uint32_t length = kPage;
    Status status;
    std::vector<PinnedPage> pins =
        Pin(t, std::span<const PageId>(&id, 1), std::span<const uint32_t>(&length, 1), info, &status);
    if (!status.ok()) return status;
    return std::move(pins[0]);
  }

  storage::testing::TempDir dir_;
};

// What only one kind of tier does.
class RamTierTest : public PageTierTest {};
class SlabTierTest : public PageTierTest {};
class ColdTierTest : public PageTierTest {};

TEST_P(PageTierTest, WrittenPagesPinBackByteForByte) {
  auto t = Open(8);
  ASSERT_NE(t, nullptr);
  const PageInfo info = Info(2, 0);
  const std::vector<PageId> ids = {PageId{11}, PageId{12}, PageId{13}};
  const std::vector<uint32_t> lengths = {kPage, kPage - 64, 128};
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::vector<uint8_t> bytes = Bytes(i, lengths[i]);
    StatusOr<const uint8_t*> in_place = t->Write(ids[i], bytes, PrecisionClass::kSparse, info);
    ASSERT_TRUE(in_place.ok()) << in_place.status().ToString();
    // RAM pages are read where they lie; cold and device pages only through Pin.
    EXPECT_EQ(*in_place != nullptr, this->in_place());
  }
  Status status;
  std::vector<PinnedPage> pins = Pin(*t, ids, lengths, info, &status);
  ASSERT_TRUE(status.ok()) << status.ToString();
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_NE(pins[i].data, nullptr);
    EXPECT_EQ(std::vector<uint8_t>(pins[i].data, pins[i].data + lengths[i]), Bytes(i, lengths[i])) << i;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(pins[i].data) % 64, 0u) << "pages start on a cache line";
  }
  t->Flush();
  EXPECT_EQ(t->io().writes, ids.size());
}

TEST_P(PageTierTest, FreedPagesCannotBePinned) {
  auto t = Open(4);
  ASSERT_NE(t, nullptr);
  const PageInfo info = Info(0, 0);
  const PageId id{5};
  ASSERT_TRUE(t->Write(id, Bytes(1, kPage), PrecisionClass::kSparse, info).ok());
  t->Free(id);
  t->Free(PageId{999});  // unknown: ignored
  EXPECT_FALSE(PinOne(*t, id, info).ok());
}

TEST_P(PageTierTest, SlotsCountWhatAPageStores) {
  auto t = Open(4);
  ASSERT_NE(t, nullptr);
  const PageInfo plain = Info(0, 0);
  PageInfo first = plain;
  first.transform.v_scale.assign(64, 1.0f);
  first.transform.k_mean.assign(64, 0.0f);
  EXPECT_EQ(t->SlotsFor(t->StoredBytes(kPage, plain)), cold() ? storage::SlotsFor(RecordBytes(0) + kPage,
                                                                                  t->slot_bytes())
                                                              : 1u);
  EXPECT_GE(t->slot_count() * t->slot_bytes(), t->capacity_bytes());
  if (cold()) {
    // The record in front of a cold page carries the head's transform on its first page.
    EXPECT_EQ(t->StoredBytes(kPage, plain), kPage + RecordBytes(0));
    EXPECT_EQ(t->StoredBytes(kPage, first), kPage + RecordBytes(128));
    EXPECT_EQ(t->SlotsFor(1u << 30), 0u) << "larger than the store's largest page";
  } else {
    EXPECT_EQ(t->StoredBytes(kPage, first), kPage);
    EXPECT_EQ(t->SlotsFor(static_cast<uint32_t>(t->slot_bytes()) + 1), 0u);
    EXPECT_EQ(t->slot_count(), 4u);
  }
}

TEST_P(PageTierTest, DescribesItself) {
  auto t = Open(4);
  ASSERT_NE(t, nullptr);
  const std::string d = t->Describe();
  EXPECT_EQ(d.rfind(cold() ? "cold " : "warm ", 0), 0u) << d;
  if (cold()) {
    EXPECT_NE(d.find(dir_.path()), std::string::npos) << d;
  }
}

// Allocate hands out a slot the caller fills where it lies (the GPU encoder); the cold tier takes bytes only.
TEST_P(PageTierTest, AllocatedSlotsPinBackWhatTheCallerWrote) {
  auto t = Open(4);
  ASSERT_NE(t, nullptr);
  const PageInfo info = Info(0, 0);
  StatusOr<PageTier::Slot> slot = t->Allocate(PageId{8}, kPage, PrecisionClass::kHot, info);
  if (cold()) {
    EXPECT_EQ(slot.status().code(), StatusCode::kUnimplemented) << slot.status().ToString();
    return;
  }
  ASSERT_TRUE(slot.ok()) << slot.status().ToString();
  ASSERT_NE(slot->at, nullptr);
  EXPECT_EQ(slot->host != nullptr, in_place());
  const std::vector<uint8_t> bytes = Bytes(8, kPage);
  if (slab()) {
    ASSERT_TRUE(static_cast<gpu::SlabPageTier*>(t.get())->pool().memory().CopyIn(slot->at, bytes.data(), kPage).ok());
  } else {
    std::memcpy(slot->at, bytes.data(), kPage);
  }
  StatusOr<PinnedPage> pin = PinOne(*t, PageId{8}, info);
  ASSERT_TRUE(pin.ok()) << pin.status().ToString();
  EXPECT_EQ(std::vector<uint8_t>(pin->data, pin->data + kPage), bytes);
  t->Free(PageId{8});
  EXPECT_FALSE(PinOne(*t, PageId{8}, info).ok());
}

// A RAM tier refuses at once; the cold tier's budget is the store's to keep (a FailedWrite otherwise).
TEST_P(RamTierTest, RefusesAPageWithNoSlotLeft) {
  auto t = Open(2);
  ASSERT_NE(t, nullptr);
  const PageInfo info = Info(0, 0);
  ASSERT_TRUE(t->Write(PageId{1}, Bytes(1, kPage), PrecisionClass::kActive, info).ok());
  ASSERT_TRUE(t->Write(PageId{2}, Bytes(2, kPage), PrecisionClass::kActive, info).ok());
  StatusOr<const uint8_t*> full = t->Write(PageId{3}, Bytes(3, kPage), PrecisionClass::kActive, info);
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted);
  t->Free(PageId{1});
  EXPECT_TRUE(t->Write(PageId{3}, Bytes(3, kPage), PrecisionClass::kActive, info).ok());
}

TEST_P(ColdTierTest, PagesCarryTheirRecordAndSurviveARestart) {
  PageInfo first = Info(4, 0xabc);
  first.transform.v_scale.assign(64, 0.5f);
  const PageInfo unnamed = Info(5, 0);  // no prefix hash: nothing can reuse it
  {
    auto t = Open(8);
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(t->Write(PageId{21}, Bytes(21, kPage), PrecisionClass::kSparse, first).ok());
    ASSERT_TRUE(t->Write(PageId{22}, Bytes(22, kPage), PrecisionClass::kActive, unnamed).ok());
    StatusOr<PinnedPage> pin = PinOne(*t, PageId{21}, first);
    ASSERT_TRUE(pin.ok()) << pin.status().ToString();
    uint32_t record_bytes = 0;
    StatusOr<PageRecord> r = DecodeRecord(*pin->hold, &record_bytes);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(pin->data, pin->hold->data() + record_bytes);
    EXPECT_EQ(r->layer, 4);
    EXPECT_EQ(r->cls, PrecisionClass::kSparse);
    EXPECT_EQ(r->k, kernels::KvFormat::kTq4);
    EXPECT_EQ(r->transform.v_scale, first.transform.v_scale);
    t->Flush();
  }
  auto t = Open(8);
  ASSERT_NE(t, nullptr);
  std::vector<ColdPageTier::Recovered> found = static_cast<ColdPageTier&>(*t).TakeRecovered();
  ASSERT_EQ(found.size(), 1u) << "the page no prefix names is dropped";
  EXPECT_EQ(found[0].id, PageId{21});
  EXPECT_EQ(found[0].cls, PrecisionClass::kSparse);
  EXPECT_EQ(found[0].length, kPage);
  EXPECT_EQ(found[0].stored, t->StoredBytes(kPage, first));
  EXPECT_EQ(found[0].info.prefix_hash, 0xabcu);
  EXPECT_EQ(found[0].info.page_index, 3u);
  EXPECT_TRUE(static_cast<ColdPageTier&>(*t).TakeRecovered().empty()) << "once";
  StatusOr<PinnedPage> pin = PinOne(*t, PageId{21}, first);
  ASSERT_TRUE(pin.ok()) << pin.status().ToString();
  EXPECT_EQ(std::vector<uint8_t>(pin->data, pin->data + kPage), Bytes(21, kPage));
}

TEST_P(ColdTierTest, PinRefusesBytesOfAnotherSize) {
  auto t = Open(4);
  ASSERT_NE(t, nullptr);
  const PageInfo info = Info(0, 0);
  ASSERT_TRUE(t->Write(PageId{3}, Bytes(3, kPage), PrecisionClass::kSparse, info).ok());
  std::vector<PageTier::PinRef> refs = {{PageId{3}, t->StoredBytes(kPage, info) + 64, kPage}};
  std::vector<PinnedPage> out(1);
  EXPECT_EQ(t->Pin(refs, out).code(), StatusCode::kDataLoss);
}

TEST_P(ColdTierTest, WriteOnAFullDiskComesBackWithItsBytes) {
  storage::FaultQueue* fault = nullptr;
  auto t = Open(4, &fault);
  ASSERT_NE(t, nullptr);
  ASSERT_NE(fault, nullptr);
  fault->AddRule({storage::FaultKind::kEnospc, storage::IoOp::kWrite, {}, 1});
  const PageInfo info = Info(0, 0);
  ASSERT_TRUE(t->Write(PageId{8}, Bytes(8, kPage), PrecisionClass::kSparse, info).ok());
  t->Flush();
  std::vector<PageTier::FailedWrite> failed = t->TakeFailedWrites();
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].id, PageId{8});
  EXPECT_EQ(failed[0].status.code(), StatusCode::kResourceExhausted) << failed[0].status.ToString();
  ASSERT_EQ(failed[0].stored->size(), t->StoredBytes(kPage, info));
  EXPECT_EQ(std::vector<uint8_t>(failed[0].stored->end() - kPage, failed[0].stored->end()), Bytes(8, kPage));
  EXPECT_FALSE(t->admitting()) << "a full disk stops admission";
  EXPECT_TRUE(t->TakeFailedWrites().empty());
}

// The GPU kernels read a page at its address in the tier's memory; a page larger than a slot, or a budget that holds
// no slot, is refused.
TEST_P(SlabTierTest, PagesLieAtTheirAddressUntilFreed) {
  auto t = Open(4);
  ASSERT_NE(t, nullptr);
  auto* slab = static_cast<gpu::SlabPageTier*>(t.get());
  const PageInfo info = Info(1, 0);
  const std::vector<uint8_t> bytes = Bytes(3, kPage);
  ASSERT_TRUE(t->Write(PageId{3}, bytes, PrecisionClass::kHot, info).ok());
  const uint8_t* at = slab->Address(PageId{3});
  ASSERT_NE(at, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(at) % gpu::kSlotAlign, 0u);
  std::vector<uint8_t> back(kPage);
  ASSERT_TRUE(slab->pool().memory().CopyOut(back.data(), at, kPage).ok());
  EXPECT_EQ(back, bytes);
  EXPECT_EQ(slab->pool().used_slots(), 1);
  t->Free(PageId{3});
  EXPECT_EQ(slab->Address(PageId{3}), nullptr);
  EXPECT_EQ(slab->pool().used_slots(), 0);
  EXPECT_EQ(t->Write(PageId{4}, Bytes(4, kPage + 1), PrecisionClass::kHot, info).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(t->io().writes, 1u);
  auto none = gpu::SlabPageTier::Open(KvTier::kHot, gpu::HostMemory(), kPage - 1, kPage);
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("holds no page"), std::string::npos) << none.status().ToString();
}

std::string ParamName(const ::testing::TestParamInfo<std::string>& p) {
  std::string name = p.param;
  for (char& c : name) {
    if (c == ':') c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Tiers, PageTierTest,
                         ::testing::Values("ram", "cold:io_uring", "cold:pread", "slab:host", "slab:copied"),
                         ParamName);
INSTANTIATE_TEST_SUITE_P(Tiers, RamTierTest, ::testing::Values("ram", "slab:host", "slab:copied"), ParamName);
INSTANTIATE_TEST_SUITE_P(Tiers, SlabTierTest, ::testing::Values("slab:host", "slab:copied"), ParamName);
INSTANTIATE_TEST_SUITE_P(Tiers, ColdTierTest, ::testing::Values("cold:io_uring", "cold:pread"), ParamName);

}  // namespace
}  // namespace tq::engine
