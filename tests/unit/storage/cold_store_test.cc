// ColdStore functional tests, run against the io_uring and the pread backends.
#include "storage/cold_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <map>

#include "storage/crc32c.h"
#include "storage/page_format.h"
#include "storage_test_util.h"

namespace tq::storage {
namespace {

using testing::PageBytes;

class ColdStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { TQ_SKIP_IF_NO_BACKEND(GetParam()); }

  ColdStoreOptions Options(uint32_t depth = 32) const {
    ColdStoreOptions o;
    o.cold_dir = dir_.path() + "/cold";
    o.capacity_bytes = 64ull << 20;
    o.max_page_bytes = 16 * 1024 - kPageHeaderBytes;  // 16 KiB slots
    o.file_bytes = 4ull << 20;                        // several files
    o.io = IoQueueOptions{GetParam(), depth};
    return o;
  }
  std::unique_ptr<ColdStore> Open(const ColdStoreOptions& o) {
    StatusOr<std::unique_ptr<ColdStore>> s = ColdStore::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return nullptr;
    EXPECT_EQ((*s)->backend(), GetParam());
    return std::move(s).value();
  }
  // Stores page (id, PageBytes(seed(id), length(id))) for each id in one PutMany batch.
  template <typename Seed, typename Length>
  static void PutAll(ColdStore& store, const std::vector<uint64_t>& ids, Seed seed, Length length) {
    std::vector<std::vector<std::byte>> bytes;
    std::vector<ColdStore::PutRequest> reqs;
    for (uint64_t id : ids) bytes.push_back(PageBytes(seed(id), length(id)));
    for (size_t i = 0; i < ids.size(); ++i) reqs.push_back({ids[i], bytes[i]});
    std::vector<Status> results = store.PutMany(reqs);
    ASSERT_EQ(results.size(), ids.size());
    for (size_t i = 0; i < ids.size(); ++i)
      ASSERT_TRUE(results[i].ok()) << ids[i] << ": " << results[i].ToString();
  }
  static std::vector<uint64_t> Ids(uint64_t n, uint64_t step = 1) {
    std::vector<uint64_t> ids;
    for (uint64_t i = 0; i < n; ++i) ids.push_back(i * step);
    return ids;
  }
  static size_t LengthOf(uint64_t id) { return 1 + (id * 2654435761u) % (16 * 1024 - kPageHeaderBytes); }
  static void ExpectPageFrom(ColdStore& store, uint64_t id, uint64_t seed, size_t length) {
    std::vector<std::byte> got(16 * 1024);
    StatusOr<uint32_t> n = store.Read(id, got);
    ASSERT_TRUE(n.ok()) << "page " << id << ": " << n.status().ToString();
    ASSERT_EQ(*n, length);
    EXPECT_EQ(std::memcmp(got.data(), PageBytes(seed, length).data(), length), 0) << "page " << id;
  }
  static void ExpectPage(ColdStore& store, uint64_t id, size_t length) {
    std::vector<std::byte> got(16 * 1024);
    StatusOr<uint32_t> n = store.Read(id, got);
    ASSERT_TRUE(n.ok()) << "page " << id << ": " << n.status().ToString();
    ASSERT_EQ(*n, length);
    EXPECT_EQ(std::memcmp(got.data(), PageBytes(id, length).data(), length), 0) << "page " << id;
  }
  // Byte `at` of the slot of the `slot`-th page of file 0 (a fresh store fills slots from 0 up).
  void FlipOnDisk(const ColdStore& store, uint64_t slot, uint64_t at) {
    int fd = ::open((dir_.path() + "/cold/cold-0000.tqc").c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    off_t off = static_cast<off_t>(kFileHeaderBytes + slot * store.slot_bytes() + at);
    unsigned char b = 0;
    ASSERT_EQ(::pread(fd, &b, 1, off), 1);
    b ^= 0x40;
    ASSERT_EQ(::pwrite(fd, &b, 1, off), 1);
    ::close(fd);
  }

  testing::TempDir dir_;
};

TEST_P(ColdStoreTest, RoundTripOfManyPages) {
  auto store = Open(Options());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->slot_bytes(), 16u * 1024);
  constexpr uint64_t kPages = 600;
  PutAll(
      *store, Ids(kPages), [](uint64_t id) { return id; }, LengthOf);
  EXPECT_EQ(store->pages(), kPages);
  for (uint64_t id = 0; id < kPages; id += 7) ExpectPage(*store, id, LengthOf(id));
  TierStatsSnapshot s = store->stats().Snapshot();
  EXPECT_EQ(s.pages, kPages);
  EXPECT_EQ(s.bytes_used, kPages * 16 * 1024);
  EXPECT_EQ(s.bytes_capacity, 64ull << 20);
  EXPECT_EQ(s.writes, kPages);
  EXPECT_EQ(s.reads, (kPages + 6) / 7);
  EXPECT_EQ(s.read_latency_count, s.reads);
  EXPECT_GT(s.read_latency_sum_seconds, 0.0);
  uint64_t in_buckets = 0;
  for (uint64_t b : s.read_latency_buckets) in_buckets += b;
  EXPECT_EQ(in_buckets, s.reads);
  for (uint64_t e : s.errors) EXPECT_EQ(e, 0u);
}

TEST_P(ColdStoreTest, ConcurrentReadsInFlightAtEachDepth) {
  for (uint32_t depth : {1u, 8u, 32u, 128u}) {
    SCOPED_TRACE("depth " + std::to_string(depth));
    ColdStoreOptions o = Options(depth);
    o.cold_dir += std::to_string(depth);
    auto store = Open(o);
    ASSERT_NE(store, nullptr);
    constexpr uint64_t kPages = 300;
    PutAll(
        *store, Ids(kPages, 3), [](uint64_t id) { return id; }, [](uint64_t id) { return LengthOf(id / 3); });
    std::vector<std::vector<std::byte>> dest(kPages + 1, std::vector<std::byte>(16 * 1024));
    std::vector<ColdStore::ReadRequest> reqs;
    for (uint64_t id = 0; id < kPages; ++id) reqs.push_back({id * 3, dest[id], id});
    reqs.push_back({1, dest[kPages], 999});  // absent: a not_found result, not an error of the batch
    ASSERT_TRUE(store->SubmitReads(reqs).ok());
    EXPECT_EQ(store->reads_outstanding(), kPages + 1);
    std::vector<ColdStore::ReadResult> results;
    ASSERT_TRUE(store->WaitReads(&results, kPages + 1).ok());
    ASSERT_EQ(results.size(), kPages + 1);
    EXPECT_EQ(store->reads_outstanding(), 0u);
    for (const ColdStore::ReadResult& r : results) {
      if (r.tag == 999) {
        EXPECT_EQ(r.status.code(), StatusCode::kNotFound);
        continue;
      }
      ASSERT_TRUE(r.status.ok()) << r.status.ToString();
      ASSERT_EQ(r.length, LengthOf(r.tag));
      EXPECT_EQ(std::memcmp(dest[r.tag].data(), PageBytes(r.tag * 3, r.length).data(), r.length), 0);
    }
  }
}

TEST_P(ColdStoreTest, PutManyKeepsTheLastCopyOfAnIdAndReportsEachRequest) {
  ColdStoreOptions o = Options(4);
  o.capacity_bytes = 60 * 16 * 1024;  // overwritten copies keep their slots until the batch ends
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  std::vector<std::vector<std::byte>> bytes;
  for (uint64_t i = 0; i < 50; ++i) bytes.push_back(PageBytes(i, 1000 + i));
  std::vector<ColdStore::PutRequest> reqs;
  for (uint64_t i = 0; i < 50; ++i) reqs.push_back({i % 20, bytes[i]});  // ids 0..19, written 2-3 times
  reqs.push_back({99, std::span<const std::byte>(bytes[0].data(), 0)});
  std::vector<Status> results = store->PutMany(reqs);
  for (size_t i = 0; i < results.size(); ++i)
    EXPECT_TRUE(results[i].ok()) << i << ": " << results[i].ToString();
  EXPECT_EQ(store->pages(), 21u);
  for (uint64_t id = 0; id < 20; ++id) {
    uint64_t last = id + 40 < 50 ? id + 40 : id + 20;
    ExpectPageFrom(*store, id, last, 1000 + last);
  }
  EXPECT_EQ(store->PageLength(99), 0u);
  EXPECT_EQ(store->stats().Snapshot().bytes_used, 21u * 16 * 1024);
}

TEST_P(ColdStoreTest, ReadsAndWritesInterleave) {
  auto store = Open(Options(8));
  ASSERT_NE(store, nullptr);
  for (uint64_t id = 0; id < 64; ++id) ASSERT_TRUE(store->Put(id, PageBytes(id, LengthOf(id))).ok());
  std::vector<std::vector<std::byte>> dest(64, std::vector<std::byte>(16 * 1024));
  std::vector<ColdStore::ReadRequest> reqs;
  for (uint64_t id = 0; id < 64; ++id) reqs.push_back({id, dest[id], id});
  ASSERT_TRUE(store->SubmitReads(reqs).ok());
  // Overwrites and erases while those reads are in flight: a slot being read is never reused under them.
  for (uint64_t id = 0; id < 64; id += 2) ASSERT_TRUE(store->Put(id, PageBytes(id + 1000, 100)).ok());
  for (uint64_t id = 1; id < 64; id += 4) ASSERT_TRUE(store->Erase(id).ok());
  std::vector<ColdStore::ReadResult> results;
  ASSERT_TRUE(store->WaitReads(&results, 64).ok());
  ASSERT_EQ(results.size(), 64u);
  for (const ColdStore::ReadResult& r : results) {
    if (!r.status.ok()) {  // read after the erase reached it: not_found, never wrong bytes
      EXPECT_EQ(r.status.code(), StatusCode::kNotFound) << r.status.ToString();
      continue;
    }
    bool old = r.length == LengthOf(r.tag) &&
               std::memcmp(dest[r.tag].data(), PageBytes(r.tag, r.length).data(), r.length) == 0;
    bool fresh =
        r.length == 100 && std::memcmp(dest[r.tag].data(), PageBytes(r.tag + 1000, 100).data(), 100) == 0;
    EXPECT_TRUE(old || fresh) << "page " << r.tag;
  }
  for (uint64_t id = 0; id < 64; id += 2) {
    std::vector<std::byte> got(16 * 1024);
    ASSERT_EQ(store->Read(id, got).value_or(0), 100u);
    EXPECT_EQ(std::memcmp(got.data(), PageBytes(id + 1000, 100).data(), 100), 0);
  }
}

TEST_P(ColdStoreTest, ReopenRebuildsTheIndex) {
  std::map<uint64_t, std::pair<uint64_t, size_t>> expect;  // id -> (content seed, length)
  {
    auto store = Open(Options());
    ASSERT_NE(store, nullptr);
    for (uint64_t id = 0; id < 300; ++id) {
      ASSERT_TRUE(store->Put(id, PageBytes(id, LengthOf(id))).ok());
      expect[id] = {id, LengthOf(id)};
    }
    for (uint64_t id = 0; id < 300; id += 10) {
      ASSERT_TRUE(store->Put(id, PageBytes(id + 7, 333)).ok());
      expect[id] = {id + 7, 333};
    }
    for (uint64_t id = 5; id < 300; id += 10) {
      ASSERT_TRUE(store->Erase(id).ok());
      expect.erase(id);
    }
    EXPECT_EQ(store->Erase(5).code(), StatusCode::kNotFound);
  }
  for (int round = 0; round < 2; ++round) {
    auto store = Open(Options());
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->open_report().pages_found, expect.size());
    EXPECT_EQ(store->open_report().pages_dropped, 0u);
    EXPECT_EQ(store->open_report().duplicates, 0u);
    EXPECT_EQ(store->stats().Snapshot().pages, expect.size());
    for (const auto& [id, v] : expect) {
      std::vector<std::byte> got(16 * 1024);
      StatusOr<uint32_t> n = store->Read(id, got);
      ASSERT_TRUE(n.ok()) << id << ": " << n.status().ToString();
      ASSERT_EQ(*n, v.second);
      EXPECT_EQ(std::memcmp(got.data(), PageBytes(v.first, v.second).data(), v.second), 0) << id;
    }
    // Sequence numbers continue after a restart: this overwrite wins on the next open.
    ASSERT_TRUE(store->Put(1, PageBytes(4242, 50)).ok());
    expect[1] = {4242, 50};
  }
}

TEST_P(ColdStoreTest, CorruptPageOnDiskIsDroppedAtReopen) {
  {
    auto store = Open(Options());
    ASSERT_NE(store, nullptr);
    for (uint64_t id = 0; id < 50; ++id) ASSERT_TRUE(store->Put(100 + id, PageBytes(100 + id, 4000)).ok());
    FlipOnDisk(*store, 17, kPageHeaderBytes + 1234);  // payload byte of page 117
  }
  {
    auto store = Open(Options());
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->open_report().pages_found, 49u);
    EXPECT_EQ(store->open_report().pages_dropped, 1u);
    EXPECT_EQ(store->stats().errors(TierError::kDroppedAtOpen), 1u);
    EXPECT_FALSE(store->Contains(117));
    for (uint64_t id = 0; id < 50; ++id) {
      if (id != 17) ExpectPage(*store, 100 + id, 4000);
    }
    std::vector<std::byte> got(4000);
    EXPECT_EQ(store->Read(117, got).status().code(), StatusCode::kNotFound);
  }
  auto store = Open(Options());  // the dropped slot was zeroed: nothing to report the second time
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->open_report().pages_found, 49u);
  EXPECT_EQ(store->open_report().pages_dropped, 0u);
}

TEST_P(ColdStoreTest, FileWithADamagedHeaderIsDroppedWhole) {
  ColdStoreOptions o = Options();
  o.file_bytes = 4096 + 8 * 16 * 1024;  // 8 slots per file: pages 0-7 in file 0, 8-15 in file 1
  o.capacity_bytes = 32 * 16 * 1024;    // 4 files
  {
    auto store = Open(o);
    ASSERT_NE(store, nullptr);
    PutAll(
        *store, Ids(16), [](uint64_t id) { return id; }, [](uint64_t) { return 500; });
  }
  int fd = ::open((dir_.path() + "/cold/cold-0001.tqc").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const char junk[4] = {'j', 'u', 'n', 'k'};
  ASSERT_EQ(::pwrite(fd, junk, 4, 0), 4);
  ::close(fd);
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->pages(), 8u);
  EXPECT_EQ(store->stats().errors(TierError::kDroppedAtOpen), 1u);
  for (uint64_t id = 0; id < 8; ++id) ExpectPage(*store, id, 500);
  for (uint64_t id = 8; id < 16; ++id) EXPECT_FALSE(store->Contains(id));
  EXPECT_TRUE(store->Put(100, PageBytes(100, 500)).ok());  // the dropped file is usable again
}

TEST_P(ColdStoreTest, CorruptionAndTruncationWhileOpenAreDataLoss) {
  auto store = Open(Options());
  ASSERT_NE(store, nullptr);
  for (uint64_t id = 0; id < 8; ++id) ASSERT_TRUE(store->Put(id, PageBytes(id, 8000)).ok());
  FlipOnDisk(*store, 3, kPageHeaderBytes + 10);
  FlipOnDisk(*store, 4, 8);  // header: the page id
  std::vector<std::byte> got(16 * 1024, std::byte{0xAB});
  EXPECT_EQ(store->Read(3, got).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(store->Read(4, got).status().code(), StatusCode::kDataLoss);
  for (std::byte b : got) ASSERT_EQ(b, std::byte{0xAB});  // never bad bytes handed up
  // Cut the file in the middle of the last page: a short read.
  ASSERT_EQ(::truncate((dir_.path() + "/cold/cold-0000.tqc").c_str(),
                       static_cast<off_t>(kFileHeaderBytes + 7 * store->slot_bytes() + 4096)),
            0);
  EXPECT_EQ(store->Read(7, got).status().code(), StatusCode::kDataLoss);
  ExpectPage(*store, 6, 8000);
  EXPECT_EQ(store->stats().errors(TierError::kDataLoss), 3u);
}

TEST_P(ColdStoreTest, BudgetAndArguments) {
  ColdStoreOptions o = Options();
  o.capacity_bytes = 10 * 16 * 1024 + 100;  // 10 slots
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->slot_count(), 10u);
  for (uint64_t id = 0; id < 10; ++id) ASSERT_TRUE(store->Put(id, PageBytes(id, 10)).ok());
  Status full = store->Put(10, PageBytes(10, 10));
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted) << full.ToString();
  EXPECT_EQ(store->stats().errors(TierError::kOverBudget), 1u);
  EXPECT_TRUE(store->admitting());  // over budget is not a full disk
  ASSERT_TRUE(store->Erase(3).ok());
  EXPECT_TRUE(store->Put(10, PageBytes(10, 10)).ok());
  EXPECT_EQ(store->Put(11, PageBytes(0, 16 * 1024)).code(), StatusCode::kInvalidArgument);
  std::vector<std::byte> small(5);
  EXPECT_EQ(store->Read(10, small).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Read(3, small).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store->Put(12, {}).code() == StatusCode::kResourceExhausted);
}

TEST_P(ColdStoreTest, ReopenWithAnotherSlotSizeIsRefused) {
  {
    auto store = Open(Options());
    ASSERT_NE(store, nullptr);
  }
  ColdStoreOptions o = Options();
  o.max_page_bytes = 64 * 1024;
  StatusOr<std::unique_ptr<ColdStore>> s = ColdStore::Open(o);
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition) << s.status().ToString();
}

TEST_P(ColdStoreTest, WithoutFallocateFilesGrowByWrites) {
  ColdStoreOptions o = Options();
  o.grow_slots = 0;
  {
    auto store = Open(o);
    ASSERT_NE(store, nullptr);
    for (uint64_t id = 0; id < 20; ++id) ASSERT_TRUE(store->Put(id, PageBytes(id, 100)).ok());
  }
  auto store = Open(o);  // the last slot is only partly in the file
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->open_report().pages_found, 20u);
  ExpectPage(*store, 19, 100);
}

// Small slots (4 KiB), pages of 1 to 15 slots, three streams written interleaved: each stream's pages lie back
// to back on disk, a stream read in order is one I/O, and a reopen finds every page (payload left behind by
// erased pages is free space, not damage).
TEST_P(ColdStoreTest, PagesSpanSlotsAndStreamsLieBackToBack) {
  ColdStoreOptions o = Options();
  o.max_page_bytes = 60 * 1024 - kPageHeaderBytes;
  o.slot_payload_bytes = 4096 - kPageHeaderBytes;
  o.run_bytes = 256 * 1024;
  o.capacity_bytes = 8ull << 20;  // 2048 slots
  const auto length = [](uint64_t id) { return static_cast<size_t>(100 + (id * 7919) % (60 * 1024 - 200)); };
  const auto id_of = [](uint64_t stream, uint64_t i) { return stream * 1000 + i; };
  std::map<uint64_t, size_t> expect;  // id -> length
  uint64_t slots = 0;
  {
    auto store = Open(o);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->slot_bytes(), 4096u);
    EXPECT_EQ(store->extent_slots(), 64u);
    for (uint64_t i = 0; i < 12; ++i) {
      for (uint64_t stream = 1; stream <= 3; ++stream) {
        const uint64_t id = id_of(stream, i);
        const size_t n = stream == 2 ? 10000 : length(id);  // stream 2: 3 slots a page
        std::vector<std::byte> bytes = PageBytes(id, n);
        ColdStore::PutRequest r{id, bytes, stream};
        ASSERT_TRUE(store->PutMany({&r, 1})[0].ok()) << id;
        expect[id] = n;
        slots += store->SlotsFor(static_cast<uint32_t>(n));
      }
    }
    EXPECT_EQ(store->slots_used(), slots);
    EXPECT_EQ(store->stats().Snapshot().bytes_used, slots * 4096);
    // Stream 2's pages follow each other, 3 slots apart (36 slots: one extent).
    for (uint64_t i = 1; i < 12; ++i) {
      EXPECT_EQ(*store->SlotOf(id_of(2, i)), *store->SlotOf(id_of(2, i - 1)) + 3) << i;
    }
    // Read in order, the 12 pages are one I/O; each page's bytes are its own.
    std::vector<std::vector<std::byte>> dest(12, std::vector<std::byte>(10000));
    std::vector<ColdStore::ReadRequest> reqs;
    for (uint64_t i = 0; i < 12; ++i) reqs.push_back({id_of(2, i), dest[i], i});
    const uint64_t ios = store->read_ios();
    ASSERT_TRUE(store->SubmitReads(reqs).ok());
    std::vector<ColdStore::ReadResult> results;
    ASSERT_TRUE(store->WaitReads(&results, 12).ok());
    EXPECT_EQ(store->read_ios() - ios, 1u);
    for (const ColdStore::ReadResult& r : results) {
      ASSERT_TRUE(r.status.ok()) << r.status.ToString();
      EXPECT_EQ(std::memcmp(dest[r.tag].data(), PageBytes(id_of(2, r.tag), 10000).data(), 10000), 0) << r.tag;
    }
    for (const auto& [id, n] : expect) {
      std::vector<std::byte> got(60 * 1024);
      StatusOr<uint32_t> read = store->Read(id, got);
      ASSERT_TRUE(read.ok()) << id << ": " << read.status().ToString();
      ASSERT_EQ(*read, n);
      EXPECT_EQ(std::memcmp(got.data(), PageBytes(id, n).data(), n), 0) << id;
    }
    for (uint64_t i = 0; i < 12; i += 3) {  // erase some of every stream: their slots keep stale payload
      for (uint64_t stream = 1; stream <= 3; ++stream) {
        ASSERT_TRUE(store->Erase(id_of(stream, i)).ok());
        expect.erase(id_of(stream, i));
      }
    }
  }
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->open_report().pages_found, expect.size());
  EXPECT_EQ(store->open_report().pages_dropped, 0u);
  for (const auto& [id, n] : expect) {
    std::vector<std::byte> got(60 * 1024);
    ASSERT_EQ(store->Read(id, got).value_or(0), n) << id;
    EXPECT_EQ(std::memcmp(got.data(), PageBytes(id, n).data(), n), 0) << id;
  }
  // Freed slots are reused: fill the budget with 1-slot pages until it refuses, then count.
  const uint64_t used = store->slots_used();
  uint64_t stored = 0;
  while (store->Put(50000 + stored, PageBytes(stored, 100)).ok()) ++stored;
  EXPECT_EQ(stored, store->slot_count() - used);
  EXPECT_EQ(store->slots_used(), store->slot_count());
}

TEST_P(ColdStoreTest, OldFormatFilesAreRefused) {
  {
    auto store = Open(Options());
    ASSERT_NE(store, nullptr);
  }
  // Rewrite file 0's header as format version 1 (valid checksum): the store refuses it, naming the version.
  int fd = ::open((dir_.path() + "/cold/cold-0000.tqc").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  std::vector<std::byte> header(kFileHeaderBytes);
  ASSERT_EQ(::pread(fd, header.data(), header.size(), 0), static_cast<ssize_t>(header.size()));
  FileHeader h;
  std::memcpy(&h, header.data(), sizeof(h));
  h.version = 1;
  h.checksum = 0;
  h.checksum = Crc32c(std::as_bytes(std::span(&h, 1)));
  std::memcpy(header.data(), &h, sizeof(h));
  ASSERT_EQ(::pwrite(fd, header.data(), header.size(), 0), static_cast<ssize_t>(header.size()));
  ::close(fd);
  StatusOr<std::unique_ptr<ColdStore>> s = ColdStore::Open(Options());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition) << s.status().ToString();
  EXPECT_NE(s.status().message().find("version 1"), std::string::npos) << s.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(Backends, ColdStoreTest, ::testing::Values("io_uring", "pread"),
                         testing::BackendName);

}  // namespace
}  // namespace tq::storage
