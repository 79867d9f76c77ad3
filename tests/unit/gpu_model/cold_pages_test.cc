// The GPU path's cold tier (engine/gpu/cold_pages.h) on a real file through the real I/O queues (io_uring and
// pread): page pairs written and read back in two sets at once, a corrupt pair is DataLoss naming the page
// and never reaches the buffer, a full store takes nothing of a batch, erased pages free their slots. Runs
// without a GPU: the buffers here are plain aligned host memory where GpuModel passes pinned ones.
#include "engine/gpu/cold_pages.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "storage/page_format.h"
#include "tests/unit/storage/storage_test_util.h"

namespace tq::gpu {
namespace {

using storage::testing::PageBytes;

constexpr size_t kPair = 12544;  // a tq4 page pair at head_dim 64, slot-aligned

struct Aligned {
  explicit Aligned(size_t n) : p(static_cast<uint8_t*>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096))) {}
  ~Aligned() { std::free(p); }
  uint8_t* p;
};

class ColdPagesTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { TQ_SKIP_IF_NO_BACKEND(GetParam()); }

  storage::ColdStoreOptions Options(uint64_t capacity = uint64_t{64} << 20) const {
    storage::ColdStoreOptions o;
    o.cold_dir = dir_.path() + "/cold";
    o.capacity_bytes = capacity;
    o.max_page_bytes = kPair;
    o.io.backend = GetParam();
    o.io.queue_depth = 8;
    return o;
  }

  void FlipOnDisk(const ColdPages& cold, uint64_t id, uint64_t at) {
    const int fd = ::open((dir_.path() + "/cold/cold-0000.tqc").c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    const off_t off = static_cast<off_t>(storage::kFileHeaderBytes +
                                         *cold.store().SlotOf(id) * cold.store().slot_bytes() + at);
    unsigned char b = 0;
    ASSERT_EQ(::pread(fd, &b, 1, off), 1);
    b ^= 0x40;
    ASSERT_EQ(::pwrite(fd, &b, 1, off), 1);
    ::close(fd);
  }

  storage::testing::TempDir dir_;
};

// Writes n pairs (contents PageBytes(salt + i)) as one stream; their ids.
std::vector<uint64_t> WritePairs(ColdPages& cold, int n, uint64_t salt) {
  std::vector<std::vector<std::byte>> data;
  std::vector<ColdPages::Put> puts;
  for (int i = 0; i < n; ++i) data.push_back(PageBytes(salt + i, kPair));
  for (const auto& d : data) puts.push_back({d, salt});
  auto ids = cold.Write(puts);
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  return ids.ok() ? *ids : std::vector<uint64_t>{};
}

TEST_P(ColdPagesTest, TwoSetsInFlightReadBackEveryByte) {
  auto cold = ColdPages::Open(Options());
  ASSERT_TRUE(cold.ok()) << cold.status().ToString();
  const std::vector<uint64_t> a = WritePairs(**cold, 5, 100);
  const std::vector<uint64_t> b = WritePairs(**cold, 7, 200);
  ASSERT_EQ(a.size(), 5u);
  ASSERT_EQ(b.size(), 7u);
  Aligned buf_a(5 * kPair), buf_b(7 * kPair);
  std::vector<uint8_t*> dest_a, dest_b;
  for (int i = 0; i < 5; ++i) dest_a.push_back(buf_a.p + i * kPair);
  for (int i = 0; i < 7; ++i) dest_b.push_back(buf_b.p + i * kPair);
  ASSERT_TRUE((*cold)->StartReads(0, a, dest_a, kPair).ok());
  ASSERT_TRUE((*cold)->StartReads(1, b, dest_b, kPair).ok());
  EXPECT_EQ((*cold)->StartReads(0, a, dest_a, kPair).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*cold)->FinishReads(1).ok());  // the later set first: results of set 0 arrive meanwhile
  ASSERT_TRUE((*cold)->FinishReads(0).ok());
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(std::memcmp(dest_a[i], PageBytes(100 + i, kPair).data(), kPair), 0) << i;
  for (int i = 0; i < 7; ++i)
    EXPECT_EQ(std::memcmp(dest_b[i], PageBytes(200 + i, kPair).data(), kPair), 0) << i;
  // A set read again reuses its buffers.
  ASSERT_TRUE((*cold)->StartReads(0, b, dest_b, kPair).ok());
  EXPECT_TRUE((*cold)->FinishReads(0).ok());
  EXPECT_TRUE((*cold)->FinishReads(1).ok());  // nothing pending: OK at once
}

TEST_P(ColdPagesTest, CorruptPairIsDataLossAndNeverReachesTheBuffer) {
  auto cold = ColdPages::Open(Options());
  ASSERT_TRUE(cold.ok()) << cold.status().ToString();
  const std::vector<uint64_t> ids = WritePairs(**cold, 4, 7);
  ASSERT_EQ(ids.size(), 4u);
  FlipOnDisk(**cold, ids[2], storage::kPageHeaderBytes + 100);
  Aligned buf(4 * kPair);
  std::memset(buf.p, 0xAB, 4 * kPair);
  std::vector<uint8_t*> dest;
  for (int i = 0; i < 4; ++i) dest.push_back(buf.p + i * kPair);
  ASSERT_TRUE((*cold)->StartReads(1, ids, dest, kPair).ok());
  const Status s = (*cold)->FinishReads(1);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("pair " + std::to_string(ids[2])), std::string::npos) << s.ToString();
  for (size_t k = 0; k < kPair; ++k) ASSERT_EQ(dest[2][k], 0xAB) << k;
  EXPECT_EQ(std::memcmp(dest[3], PageBytes(10, kPair).data(), kPair), 0);
  // The set is usable again, and a good read of it is OK.
  ASSERT_TRUE((*cold)->StartReads(1, std::span(ids).first(2), std::span(dest).first(2), kPair).ok());
  EXPECT_TRUE((*cold)->FinishReads(1).ok());
}

TEST_P(ColdPagesTest, FullStoreTakesNothingOfABatchAndEraseFreesSlots) {
  auto cold = ColdPages::Open(Options(uint64_t{8} * 16 * 1024 + 100));  // 8 slots of 16 KiB
  ASSERT_TRUE(cold.ok()) << cold.status().ToString();
  EXPECT_EQ((*cold)->free_pages(kPair), 8u);
  const std::vector<uint64_t> first = WritePairs(**cold, 6, 1);
  ASSERT_EQ(first.size(), 6u);
  EXPECT_EQ((*cold)->free_pages(kPair), 2u);
  std::vector<std::vector<std::byte>> data(3, PageBytes(9, kPair));
  std::vector<ColdPages::Put> puts;
  for (const auto& d : data) puts.push_back({d, 2});
  auto full = (*cold)->Write(puts);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted) << full.status().ToString();
  EXPECT_EQ((*cold)->store().pages(), 6u);  // the two that fit were taken back
  (*cold)->Erase(std::span(first).first(3));
  EXPECT_EQ((*cold)->free_pages(kPair), 5u);
  EXPECT_TRUE((*cold)->Write(puts).ok());
}

TEST_P(ColdPagesTest, OpenClearsPagesOfAnEarlierProcess) {
  {
    auto cold = ColdPages::Open(Options());
    ASSERT_TRUE(cold.ok()) << cold.status().ToString();
    WritePairs(**cold, 3, 1);
  }
  auto again = ColdPages::Open(Options());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)->store().pages(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, ColdPagesTest, ::testing::Values("io_uring", "pread"),
                         storage::testing::BackendName);

}  // namespace
}  // namespace tq::gpu
