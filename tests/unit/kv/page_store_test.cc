// KvPageStore on real tiers: RAM arenas and a cold directory on the build disk, through io_uring and through the
// pread fallback (every test runs on both), with storage::FaultQueue injecting the faults a real disk cannot
// produce on demand (EIO, corruption, ENOSPC, latency).
#include "engine/kv/page_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "engine/kv/page_record.h"
#include "storage/fault_queue.h"
#include "storage/page_format.h"
#include "tests/unit/kv/page_test_util.h"
#include "tests/unit/storage/storage_test_util.h"

namespace tq::engine {
namespace {

using storage::FaultKind;
using storage::FaultQueue;
using storage::FaultRule;
using storage::IoOp;

using testing::Bytes;
using testing::kActivePage;
using testing::kHotPage;
using testing::kSparsePage;

class PageStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  // A store with room for `hot`, `warm` and `cold` pages of their class's size; faults through fault_.
  std::unique_ptr<KvPageStore> Open(uint64_t hot, uint64_t warm, uint64_t cold, uint64_t cache_bytes = 1 << 20) {
    KvStoreOptions o;
    o.hot_bytes = hot * ((kHotPage + 63) / 64 * 64);
    o.warm_bytes = warm * ((kActivePage + 63) / 64 * 64);
    o.cold_dir = cold > 0 ? dir_.path() : "";
    o.cold_bytes = cold * ColdPageBytes();
    o.cold_cache_bytes = cache_bytes;
    o.io_backend = GetParam();
    o.io_depth = 8;
    o.wrap_queue = [this](std::unique_ptr<storage::IoQueue> inner) -> std::unique_ptr<storage::IoQueue> {
      auto q = std::make_unique<FaultQueue>(std::move(inner), 7);
      fault_ = q.get();
      return q;
    };
    auto s = KvPageStore::Open(o, {kHotPage, kActivePage, kSparsePage});
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }

  // Cold slots are 4 KiB: a SPARSE page (no transform) takes its header, record and bytes rounded up to them.
  static uint64_t ColdPageBytes() { return storage::PageIoBytes(RecordBytes(0) + kSparsePage); }

  storage::testing::TempDir dir_;
  FaultQueue* fault_ = nullptr;
};

TEST_P(PageStoreTest, ClassesGoToTheirHomeTiersAndReadBack) {
  TQ_SKIP_IF_NO_BACKEND(GetParam());
  auto s = Open(4, 4, 4, /*cache_bytes=*/0);  // no cache: every cold read comes from the disk
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->home(PrecisionClass::kHot), KvTier::kHot);
  EXPECT_EQ(s->home(PrecisionClass::kActive), KvTier::kWarm);
  EXPECT_EQ(s->home(PrecisionClass::kSparse), KvTier::kCold);
  const auto hot = Bytes(1, kHotPage), active = Bytes(2, kActivePage), sparse = Bytes(3, kSparsePage);
  auto h = s->Store(PrecisionClass::kHot, hot);
  auto a = s->Store(PrecisionClass::kActive, active);
  auto c = s->Store(PrecisionClass::kSparse, sparse);
  ASSERT_TRUE(h.ok() && a.ok() && c.ok());
  EXPECT_NE(s->RamBytes(*h), nullptr);
  EXPECT_NE(s->RamBytes(*a), nullptr);
  EXPECT_EQ(s->RamBytes(*c), nullptr);  // cold
  EXPECT_EQ(s->Address(*h), s->RamBytes(*h));
  EXPECT_EQ(s->Address(*c), nullptr);
  EXPECT_EQ(s->TierOf(*a), KvTier::kWarm);
  EXPECT_EQ(s->TierOf(PageId{999999}), std::nullopt);
  s->FlushCold();
  EXPECT_EQ(testing::ReadPage(*s, *h, hot.size()), hot);
  EXPECT_EQ(testing::ReadPage(*s, *a, active.size()), active);
  EXPECT_EQ(testing::ReadPage(*s, *c, sparse.size()), sparse);
  const KvStoreStats st = s->Stats();
  EXPECT_EQ(st.tiers[0].pages, 1u);
  EXPECT_EQ(st.tiers[1].pages, 1u);
  EXPECT_EQ(st.tiers[2].pages, 1u);
  EXPECT_EQ(st.tiers[2].bytes, kSparsePage);
  EXPECT_EQ(st.class_bytes[2], kSparsePage);
  EXPECT_EQ(st.tiers[2].io.writes, 1u);
  EXPECT_GE(st.tiers[2].io.reads, 1u);  // read back from the disk, checksum verified
  EXPECT_EQ(st.cold_cache.misses, 1u);
  s->Release(*c);
  s->Release(*h);
  EXPECT_EQ(s->Stats().tiers[2].pages, 0u);
  EXPECT_EQ(s->Stats().tiers[0].pages, 0u);
}

TEST_P(PageStoreTest, FullTiersFallBackToFasterOnesThenRefuse) {
  TQ_SKIP_IF_NO_BACKEND(GetParam());
  auto s = Open(1, 1, 2);
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->Fits({0, 0, 4}));   // 2 cold + 1 warm + 1 hot
  EXPECT_FALSE(s->Fits({0, 0, 5}));
  EXPECT_FALSE(s->Fits({1, 1, 3}));  // HOT and ACTIVE take their homes first: 2 cold + nothing left
  EXPECT_TRUE(s->Fits({1, 1, 2}));
  std::vector<PageId> ids;
  for (int i = 0; i < 4; ++i) {
    auto id = s->Store(PrecisionClass::kSparse, Bytes(10 + i, kSparsePage));
    ASSERT_TRUE(id.ok()) << i << ": " << id.status().ToString();
    ids.push_back(*id);
  }
  KvStoreStats st = s->Stats();
  EXPECT_EQ(st.tiers[2].pages, 2u);
  EXPECT_EQ(st.tiers[1].pages, 1u);
  EXPECT_EQ(st.tiers[0].pages, 1u);
  EXPECT_EQ(st.fallbacks, 2u);
  auto refused = s->Store(PrecisionClass::kSparse, Bytes(99, kSparsePage));
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(s->Fits({0, 0, 1}));
  s->FlushCold();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(testing::ReadPage(*s, ids[i], kSparsePage), Bytes(10 + i, kSparsePage)) << i;
  s->Release(ids[0]);
  EXPECT_TRUE(s->Fits({0, 0, 1}));
}

TEST_P(PageStoreTest, ReadFaultsAreErrorsNeverWrongBytesAndARetryWorks) {
  TQ_SKIP_IF_NO_BACKEND(GetParam());
  auto s = Open(1, 1, 4, /*cache_bytes=*/0);
  ASSERT_NE(s, nullptr);
  const auto bytes = Bytes(5, kSparsePage);
  auto id = s->Store(PrecisionClass::kSparse, bytes);
  ASSERT_TRUE(id.ok());
  s->FlushCold();
  for (FaultKind kind : {FaultKind::kEio, FaultKind::kCorrupt, FaultKind::kShortRead}) {
    fault_->ClearRules();
    fault_->AddRule({kind, IoOp::kRead, {}, 1});  // every read
    auto pin = s->Pin(*id);
    ASSERT_FALSE(pin.ok()) << static_cast<int>(kind);
    EXPECT_TRUE(pin.status().code() == StatusCode::kIoError || pin.status().code() == StatusCode::kDataLoss)
        << pin.status().ToString();
  }
  fault_->ClearRules();
  EXPECT_EQ(testing::ReadPage(*s, *id, bytes.size()), bytes);
  EXPECT_GE(s->Stats().cold_cache.read_failures, 3u);
}

TEST_P(PageStoreTest, AFailedColdWriteIsRehomedToRamAndStaysReadable) {
  TQ_SKIP_IF_NO_BACKEND(GetParam());
  auto s = Open(2, 2, 4);
  ASSERT_NE(s, nullptr);
  fault_->AddRule({FaultKind::kEnospc, IoOp::kWrite, {}, 1});  // the disk is full
  const auto bytes = Bytes(6, kSparsePage);
  auto id = s->Store(PrecisionClass::kSparse, bytes);
  ASSERT_TRUE(id.ok());
  s->FlushCold();
  // Before the manager re-homes it, the page is still readable (from the cold cache).
  EXPECT_EQ(testing::ReadPage(*s, *id, bytes.size()), bytes);
  EXPECT_EQ(s->Maintain(), 1u);
  EXPECT_NE(s->RamBytes(*id), nullptr);
  EXPECT_EQ(testing::ReadPage(*s, *id, bytes.size()), bytes);
  KvStoreStats st = s->Stats();
  EXPECT_EQ(st.rehomed, 1u);
  EXPECT_EQ(st.tiers[2].pages, 0u);
  EXPECT_EQ(st.tiers[1].pages, 1u);
  // The disk said ENOSPC: the cold tier admits nothing more, SPARSE pages go to the warm tier directly.
  auto next = s->Store(PrecisionClass::kSparse, Bytes(7, kSparsePage));
  ASSERT_TRUE(next.ok());
  EXPECT_NE(s->RamBytes(*next), nullptr);
  // Events: stored (cold), moved (cold -> warm), stored (warm).
  uint64_t first = 0;
  std::vector<KvEvent> ev = s->EventsSince(0, 100, 0, &first);
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(first, 1u);
  EXPECT_EQ(ev[0].kind, KvEvent::Kind::kStored);
  EXPECT_EQ(ev[0].tier, KvTier::kCold);
  EXPECT_EQ(ev[1].kind, KvEvent::Kind::kMoved);
  EXPECT_EQ(ev[1].from, KvTier::kCold);
  EXPECT_EQ(ev[1].tier, KvTier::kWarm);
  EXPECT_EQ(ev[2].seq, 3u);
  s->Release(*id);
  ev = s->EventsSince(3, 100, 0, &first);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, KvEvent::Kind::kEvicted);
}

TEST_P(PageStoreTest, PrefetchHidesSlowReads) {
  TQ_SKIP_IF_NO_BACKEND(GetParam());
  auto s = Open(1, 1, 20, /*cache_bytes=*/8 * (kSparsePage + RecordBytes(0)) + 1000);  // room for 8 pages
  ASSERT_NE(s, nullptr);
  std::vector<PageId> ids;
  for (int i = 0; i < 8; ++i) ids.push_back(*s->Store(PrecisionClass::kSparse, Bytes(20 + i, kSparsePage)));
  // 8 more pages push the first 8 out of the cache (least recently used first).
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(s->Store(PrecisionClass::kSparse, Bytes(40 + i, kSparsePage)).ok());
  s->FlushCold();
  ASSERT_EQ(s->Stats().cold_cache.evictions, 8u);
  // Every read now takes 20 ms; the 8 prefetched reads are in flight together.
  fault_->AddRule({FaultKind::kLatency, IoOp::kRead, {}, 1, 0.0, 20000});
  s->Prefetch(ids);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(testing::ReadPage(*s, ids[i], kSparsePage), Bytes(20 + i, kSparsePage)) << i;
  const ColdCacheStats c = s->Stats().cold_cache;
  EXPECT_EQ(c.prefetch_hits, 8u) << "late " << c.prefetch_late << ", misses " << c.misses;
  EXPECT_EQ(c.misses, 0u);
}

// cold_removals() (the read-ahead memo's check) moves exactly when a page leaves the cold cache: evictions
// and releases, not hits or new pages.
TEST_P(PageStoreTest, ColdRemovalsCountPagesLeavingTheCache) {
  TQ_SKIP_IF_NO_BACKEND(GetParam());
  auto s = Open(1, 1, 20, /*cache_bytes=*/8 * (kSparsePage + RecordBytes(0)) + 1000);  // room for 8 pages
  ASSERT_NE(s, nullptr);
  std::vector<PageId> ids;
  for (int i = 0; i < 8; ++i) ids.push_back(*s->Store(PrecisionClass::kSparse, Bytes(80 + i, kSparsePage)));
  s->FlushCold();
  EXPECT_EQ(s->cold_removals(), 0u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(testing::ReadPage(*s, ids[i], kSparsePage), Bytes(80 + i, kSparsePage)) << i;
  s->Prefetch(ids);
  EXPECT_EQ(s->cold_removals(), 0u);  // hits and read-ahead of cached pages remove nothing
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s->Store(PrecisionClass::kSparse, Bytes(90 + i, kSparsePage)).ok());
  s->FlushCold();
  const uint64_t evicted = s->Stats().cold_cache.evictions;
  EXPECT_EQ(evicted, 3u);
  EXPECT_EQ(s->cold_removals(), evicted);
  s->Release(ids[0]);  // cached or not, it may have been: a release counts when it was
  EXPECT_GE(s->cold_removals(), evicted);
  EXPECT_LE(s->cold_removals(), evicted + 1);
}

// Decode reads every page of a sequence once per step, in the same order: a cyclic scan. With 12 pages and
// room for 8, least-recently-used eviction would drop each page just before it is needed (no hits at all);
// evicting the page used last keeps most of the cache useful.
TEST_P(PageStoreTest, ACyclicScanLargerThanTheCacheStillHits) {
  TQ_SKIP_IF_NO_BACKEND(GetParam());
  auto s = Open(1, 1, 20, /*cache_bytes=*/8 * (kSparsePage + RecordBytes(0)) + 1000);  // room for 8 pages
  ASSERT_NE(s, nullptr);
  std::vector<PageId> ids;
  for (int i = 0; i < 12; ++i) ids.push_back(*s->Store(PrecisionClass::kSparse, Bytes(60 + i, kSparsePage)));
  s->FlushCold();
  for (int i = 0; i < 12; ++i) EXPECT_EQ(testing::ReadPage(*s, ids[i], kSparsePage), Bytes(60 + i, kSparsePage)) << i;
  const ColdCacheStats before = s->Stats().cold_cache;
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 12; ++i) EXPECT_EQ(testing::ReadPage(*s, ids[i], kSparsePage), Bytes(60 + i, kSparsePage)) << i;
  }
  const ColdCacheStats after = s->Stats().cold_cache;
  EXPECT_GE(after.prefetch_hits - before.prefetch_hits, 12u)
      << "misses " << after.misses - before.misses << " of 24 reads";
  EXPECT_LE(after.cached_bytes, 8 * (kSparsePage + RecordBytes(0)) + 1000);
}

// Read-ahead asks for pages in the order attention will use them. When more is read ahead than the cache holds,
// the page read last is the one to drop (it is needed last); dropping the oldest read, as before, dropped the
// page needed next.
TEST_P(PageStoreTest, ReadAheadPastTheCacheKeepsThePagesNeededFirst) {
  TQ_SKIP_IF_NO_BACKEND(GetParam());
  const uint64_t page = kSparsePage + RecordBytes(0);
  auto s = Open(1, 1, 24, /*cache_bytes=*/8 * page + 1000);  // room for 8 pages
  ASSERT_NE(s, nullptr);
  std::vector<PageId> ids;
  for (int i = 0; i < 20; ++i) ids.push_back(*s->Store(PrecisionClass::kSparse, Bytes(80 + i, kSparsePage)));
  s->FlushCold();  // the cache holds the 8 pages written last; 0..9 are on disk only
  const ColdCacheStats before = s->Stats().cold_cache;
  s->Prefetch(std::span<const PageId>(ids.data(), 10));
  // Ten reads land: the eight written pages and two of the read ones leave the cache.
  for (int i = 0; i < 1000 && s->Stats().cold_cache.evictions < before.evictions + 10; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(s->Stats().cold_cache.evictions, before.evictions + 10);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(testing::ReadPage(*s, ids[i], kSparsePage), Bytes(80 + i, kSparsePage)) << i;
  const ColdCacheStats after = s->Stats().cold_cache;
  EXPECT_EQ(after.prefetch_hits - before.prefetch_hits, 8u) << "misses " << after.misses - before.misses;
  EXPECT_EQ(after.misses, before.misses);
}

// The I/O thread sleeps in the queue while a read is in flight; a page asked for then must not wait for that
// read to finish first (ColdPageCache wakes the wait, IoQueue::Wake).
TEST_P(PageStoreTest, AReadAskedForDuringASlowReadDoesNotWaitForIt) {
  TQ_SKIP_IF_NO_BACKEND(GetParam());
  auto s = Open(1, 1, 20, /*cache_bytes=*/8 * (kSparsePage + RecordBytes(0)) + 1000);  // room for 8 pages
  ASSERT_NE(s, nullptr);
  std::vector<PageId> ids;
  for (int i = 0; i < 12; ++i) ids.push_back(*s->Store(PrecisionClass::kSparse, Bytes(120 + i, kSparsePage)));
  s->FlushCold();  // pages 0..3 are on disk only
  fault_->AddRule({FaultKind::kLatency, IoOp::kRead, {0}, 0, 0.0, 2'000'000});  // the first read: 2 s
  s->Prefetch(std::span<const PageId>(ids.data(), 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the I/O thread is waiting for it now
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(testing::ReadPage(*s, ids[1], kSparsePage), Bytes(121, kSparsePage));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 1.0) << "the second read waited for the first";
  EXPECT_EQ(testing::ReadPage(*s, ids[0], kSparsePage), Bytes(120, kSparsePage));
}

// Attention pins all the pages of a head at once (PinMany): RAM pages directly, cold pages in one visit of
// the cache, where the ones not cached are read together rather than one after the other.
TEST_P(PageStoreTest, PinManyReadsTheMissingColdPagesTogether) {
  TQ_SKIP_IF_NO_BACKEND(GetParam());
  auto s = Open(1, 1, 20, /*cache_bytes=*/8 * (kSparsePage + RecordBytes(0)) + 1000);  // room for 8 pages
  ASSERT_NE(s, nullptr);
  const auto hot = Bytes(140, kHotPage), warm = Bytes(141, kActivePage);
  const PageId h = *s->Store(PrecisionClass::kHot, hot), w = *s->Store(PrecisionClass::kActive, warm);
  std::vector<PageId> cold;
  for (int i = 0; i < 12; ++i)
    cold.push_back(*s->Store(PrecisionClass::kSparse, Bytes(150 + i, kSparsePage)));
  s->FlushCold();  // cold pages 0..3 are on disk only
  const ColdCacheStats before = s->Stats().cold_cache;
  fault_->AddRule({FaultKind::kLatency, IoOp::kRead, {}, 1, 0.0, 300'000});  // every read: 300 ms
  const std::vector<PageId> ids = {h, cold[0], cold[1], cold[2], cold[3], w, cold[11]};
  std::vector<PinnedPage> pins(ids.size());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(s->PinMany(ids, pins).ok());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 0.9) << "four 300 ms reads one after the other";
  EXPECT_EQ(std::vector<uint8_t>(pins[0].data, pins[0].data + hot.size()), hot);
  EXPECT_EQ(pins[0].hold, nullptr);  // RAM: nothing to hold
  EXPECT_EQ(std::vector<uint8_t>(pins[5].data, pins[5].data + warm.size()), warm);
  for (int j : {1, 2, 3, 4}) {
    EXPECT_EQ(std::vector<uint8_t>(pins[j].data, pins[j].data + kSparsePage), Bytes(150 + j - 1, kSparsePage))
        << j;
    EXPECT_NE(pins[j].hold, nullptr);
    // As a RAM slot's: a cold page's bytes start on a cache line (64-byte aligned buffer, record a multiple of
    // 64 bytes).
    EXPECT_EQ(reinterpret_cast<uintptr_t>(pins[j].data) % 64, 0u) << j;
  }
  EXPECT_EQ(std::vector<uint8_t>(pins[6].data, pins[6].data + kSparsePage), Bytes(161, kSparsePage));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pins[6].data) % 64, 0u);  // read ahead earlier, cached
  const ColdCacheStats after = s->Stats().cold_cache;
  EXPECT_EQ(after.misses - before.misses, 4u);
  EXPECT_EQ(after.prefetch_hits - before.prefetch_hits, 1u);
  pins.assign(ids.size(), PinnedPage{});

  const PageId unknown{1'000'000};
  std::vector<PinnedPage> one(1);
  EXPECT_EQ(s->PinMany(std::span<const PageId>(&unknown, 1), one).code(), StatusCode::kInternal);
}

// A page that fails to read fails the whole call with the read's status (attention then recomputes the
// sequence); the same pages read again once the disk behaves.
TEST_P(PageStoreTest, PinManyFailsWithTheReadsStatusAndARetryWorks) {
  TQ_SKIP_IF_NO_BACKEND(GetParam());
  auto s = Open(1, 1, 4, /*cache_bytes=*/0);  // no cache: every cold read comes from the disk
  ASSERT_NE(s, nullptr);
  std::vector<PageId> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(*s->Store(PrecisionClass::kSparse, Bytes(170 + i, kSparsePage)));
  s->FlushCold();
  fault_->AddRule({FaultKind::kEio, IoOp::kRead, {}, 1});  // every read
  std::vector<PinnedPage> pins(ids.size());
  const Status failed = s->PinMany(ids, pins);
  ASSERT_FALSE(failed.ok());
  EXPECT_TRUE(failed.code() == StatusCode::kIoError || failed.code() == StatusCode::kDataLoss)
      << failed.ToString();
  fault_->ClearRules();
  pins.assign(ids.size(), PinnedPage{});
  ASSERT_TRUE(s->PinMany(ids, pins).ok());
  for (size_t j = 0; j < ids.size(); ++j) {
    EXPECT_EQ(std::vector<uint8_t>(pins[j].data, pins[j].data + kSparsePage), Bytes(170 + j, kSparsePage))
        << j;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, PageStoreTest, ::testing::Values("io_uring", "pread"));

// The record in front of a cold page: version 4 pads it to 64 bytes, version 3 files (16) are still read, any
// other version or a length that does not match its transform is data loss.
TEST(PageRecordTest, Version4PadsTo64AndVersion3IsStillRead) {
  PageRecord r;
  r.layout_fingerprint = 0x1234;
  r.prefix_hash = 77;
  r.page_index = 5;
  r.layer = 3;
  r.kv_head = 2;
  r.cls = PrecisionClass::kActive;
  r.k = kernels::KvFormat::kInt8;
  r.v = kernels::KvFormat::kTq4;
  r.transform.v_scale = {1.0f, 2.0f, 3.0f};
  const uint32_t floats = TransformFloats(r.transform);
  for (uint32_t n : {0u, 3u, 64u, 384u}) {
    EXPECT_EQ(RecordBytes(n) % 64, 0u) << n;
    EXPECT_EQ(RecordBytes(n, kRecordVersion16) % 16, 0u) << n;
    EXPECT_GE(RecordBytes(n), RecordBytes(n, kRecordVersion16));
  }
  std::vector<uint8_t> out(RecordBytes(floats) + 100, 0xEE);
  EncodeRecord(r, out);
  uint32_t bytes = 0;
  StatusOr<PageRecord> back = DecodeRecord(out, &bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(bytes, RecordBytes(floats));
  EXPECT_EQ(back->prefix_hash, 77u);
  EXPECT_EQ(back->layer, 3);
  EXPECT_EQ(back->v, kernels::KvFormat::kTq4);
  EXPECT_EQ(back->transform.v_scale, r.transform.v_scale);

  // The same record as version 3 wrote it: 16-byte padding, version field 3.
  std::vector<uint8_t> v3(out.begin(), out.begin() + RecordBytes(floats, kRecordVersion16));
  v3[4] = kRecordVersion16;
  v3[6] = static_cast<uint8_t>(RecordBytes(floats, kRecordVersion16));
  v3[7] = static_cast<uint8_t>(RecordBytes(floats, kRecordVersion16) >> 8);
  back = DecodeRecord(v3, &bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(bytes, RecordBytes(floats, kRecordVersion16));
  EXPECT_EQ(back->transform.v_scale, r.transform.v_scale);

  // Version 3's length under version 4 (and the reverse) is not a valid record; nor is version 2.
  std::vector<uint8_t> mixed = v3;
  mixed[4] = kRecordVersion;
  EXPECT_EQ(DecodeRecord(mixed, &bytes).status().code(), StatusCode::kDataLoss);
  std::vector<uint8_t> old_version = out;
  old_version[4] = 2;
  EXPECT_EQ(DecodeRecord(old_version, &bytes).status().code(), StatusCode::kDataLoss);
  // Format and class bytes from disk are checked, never cast: an id outside the format table is data loss.
  for (const size_t at : {33, 34}) {
    std::vector<uint8_t> bad_format = out;
    bad_format[at] = 200;
    EXPECT_EQ(DecodeRecord(bad_format, &bytes).status().code(), StatusCode::kDataLoss) << at;
  }
  std::vector<uint8_t> bad_class = out;
  bad_class[32] = 3;
  EXPECT_EQ(DecodeRecord(bad_class, &bytes).status().code(), StatusCode::kDataLoss);
}

TEST(PageStoreRamOnlyTest, WithoutAColdDirSparsePagesLiveInTheWarmTier) {
  KvStoreOptions o;
  o.hot_bytes = 1 << 20;
  o.warm_bytes = 1 << 20;
  auto s = KvPageStore::Open(o, {kHotPage, kActivePage, kSparsePage});
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE((*s)->has_cold_tier());
  EXPECT_EQ((*s)->home(PrecisionClass::kSparse), KvTier::kWarm);
  auto id = (*s)->Store(PrecisionClass::kSparse, Bytes(1, kSparsePage));
  ASSERT_TRUE(id.ok());
  EXPECT_NE((*s)->RamBytes(*id), nullptr);
}

TEST(PageStoreRamOnlyTest, AClassNoTierCanHoldIsAClearError) {
  KvStoreOptions o;
  o.hot_bytes = 0;
  o.warm_bytes = 1 << 20;
  auto s = KvPageStore::Open(o, {kHotPage, kActivePage, 0});
  // Warm slots are sized for ACTIVE pages; HOT pages are bigger and the hot tier is off.
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("hot"), std::string::npos) << s.status().ToString();
}

// The default cold directory is optional: where it cannot be used (here: another store holds it) the store runs on
// the RAM tiers and says why; the holder keeps its files. A directory the user named is not optional.
TEST(PageStoreColdDirTest, AnOptionalColdDirInUseFallsBackToRamAndLeavesTheHolderAlone) {
  storage::testing::TempDir dir;
  KvStoreOptions o;
  o.hot_bytes = 1 << 20;
  o.warm_bytes = 1 << 20;
  o.cold_dir = dir.path() + "/kv";
  o.cold_bytes = 8 << 20;
  o.io_backend = "pread";
  auto holder = KvPageStore::Open(o, {kHotPage, kActivePage, kSparsePage});
  ASSERT_TRUE(holder.ok()) << holder.status().ToString();
  auto id = (*holder)->Store(PrecisionClass::kSparse, Bytes(3, kSparsePage));
  ASSERT_TRUE(id.ok()) << id.status().ToString();

  auto named = KvPageStore::Open(o, {kHotPage, kActivePage, kSparsePage});
  ASSERT_FALSE(named.ok());
  EXPECT_NE(named.status().message().find("in use by another process"), std::string::npos)
      << named.status().ToString();

  o.cold_optional = true;
  auto fallback = KvPageStore::Open(o, {kHotPage, kActivePage, kSparsePage});
  ASSERT_TRUE(fallback.ok()) << fallback.status().ToString();
  EXPECT_FALSE((*fallback)->has_cold_tier());
  EXPECT_EQ((*fallback)->home(PrecisionClass::kSparse), KvTier::kWarm);
  EXPECT_NE((*fallback)->Stats().cold_unavailable.find("in use"), std::string::npos);
  EXPECT_NE((*fallback)->Describe().find("unavailable"), std::string::npos);
  EXPECT_TRUE((*holder)->Stats().cold_unavailable.empty());
  auto pin = (*holder)->Pin(*id);
  ASSERT_TRUE(pin.ok()) << pin.status().ToString();
  EXPECT_EQ(std::vector<uint8_t>(pin->data, pin->data + kSparsePage), Bytes(3, kSparsePage))
      << "the holder's page is intact";
}

}  // namespace
}  // namespace tq::engine
