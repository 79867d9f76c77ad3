// Every injected fault, through the ColdStore, over both real backends.
#include "storage/fault_queue.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include "storage/cold_store.h"
#include "storage/page_format.h"
#include "storage_test_util.h"

namespace tq::storage {
namespace {

using testing::PageBytes;
constexpr size_t kLen = 4096 - kPageHeaderBytes;  // no padding: every flipped byte is checksummed

class FaultTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { TQ_SKIP_IF_NO_BACKEND(GetParam()); }

  // A store over a FaultQueue; `fault_` points at it while the store lives.
  std::unique_ptr<ColdStore> Open(uint64_t seed = 1, const std::string& sub = "cold") {
    StatusOr<std::unique_ptr<IoQueue>> inner = MakeIoQueue(IoQueueOptions{GetParam(), 16});
    EXPECT_TRUE(inner.ok());
    auto fault = std::make_unique<FaultQueue>(std::move(inner).value(), seed);
    fault_ = fault.get();
    ColdStoreOptions o;
    o.cold_dir = dir_.path() + "/" + sub;
    o.capacity_bytes = 4 << 20;
    o.max_page_bytes = 4096 - kPageHeaderBytes;
    StatusOr<std::unique_ptr<ColdStore>> s = ColdStore::Open(o, std::move(fault));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ((*s)->backend(), "fault(" + GetParam() + ")");
    return std::move(s).value();
  }
  void Fill(ColdStore& store, uint64_t n) {
    for (uint64_t id = 0; id < n; ++id) ASSERT_TRUE(store.Put(id, PageBytes(id, kLen)).ok());
  }
  // Reads every page in one batch; returns the ids whose read failed with `code`; checks the others' bytes
  // and that a failed read left its buffer untouched. Pages are asked for from the last down, so each is one
  // I/O (the n-th request is the n-th read the rules count); `merged` asks in disk order, so adjacent pages go
  // down as one read.
  std::set<uint64_t> ReadAll(ColdStore& store, uint64_t n, StatusCode code, bool merged = false) {
    std::vector<std::vector<std::byte>> dest(n, std::vector<std::byte>(4096, std::byte{0xAB}));
    std::vector<ColdStore::ReadRequest> reqs;
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t id = merged ? i : n - 1 - i;
      reqs.push_back({id, dest[id], id});
    }
    EXPECT_TRUE(store.SubmitReads(reqs).ok());
    std::vector<ColdStore::ReadResult> results;
    EXPECT_TRUE(store.WaitReads(&results, n).ok());
    EXPECT_EQ(results.size(), n);
    std::set<uint64_t> failed;
    for (const ColdStore::ReadResult& r : results) {
      if (r.status.ok()) {
        EXPECT_EQ(std::memcmp(dest[r.tag].data(), PageBytes(r.tag, kLen).data(), kLen), 0) << r.tag;
        continue;
      }
      EXPECT_EQ(r.status.code(), code) << r.status.ToString();
      for (std::byte b : dest[r.tag]) EXPECT_EQ(b, std::byte{0xAB});
      failed.insert(r.tag);
    }
    return failed;
  }

  testing::TempDir dir_;
  FaultQueue* fault_ = nullptr;
};

TEST_P(FaultTest, EioOnReadIsIoErrorForThatPageOnly) {
  auto store = Open();
  Fill(*store, 40);
  fault_->AddRule({FaultKind::kEio, IoOp::kRead, {3, 17}});
  EXPECT_EQ(ReadAll(*store, 40, StatusCode::kIoError).size(), 2u);
  EXPECT_EQ(fault_->injected().eio, 2u);
  EXPECT_EQ(store->stats().errors(TierError::kIo), 2u);
  fault_->ClearRules();
  EXPECT_TRUE(ReadAll(*store, 40, StatusCode::kIoError).empty());  // the pages are still there
}

TEST_P(FaultTest, AFailedRunIsReadAgainPageByPage) {
  auto store = Open();
  Fill(*store, 40);  // back to back on disk: asked for in order, they go down as one read of 40 pages
  fault_->AddRule({FaultKind::kEio, IoOp::kRead, {0, 5}});
  // Read 0 (the run) fails; each page is then read alone (reads 1..40), and read 5 (page 4) fails again.
  EXPECT_EQ(ReadAll(*store, 40, StatusCode::kIoError, /*merged=*/true), std::set<uint64_t>{4});
  EXPECT_EQ(fault_->injected().eio, 2u);
  EXPECT_EQ(store->stats().errors(TierError::kIo), 1u);  // the run's failure is not a page's
  fault_->ClearRules();
  fault_->AddRule({FaultKind::kShortRead, IoOp::kRead, {41}});  // reads are counted from the queue's start
  EXPECT_TRUE(ReadAll(*store, 40, StatusCode::kDataLoss, /*merged=*/true).empty());
  EXPECT_EQ(fault_->injected().short_read, 1u);
  EXPECT_EQ(store->stats().Snapshot().reads, 39u + 40u);
}

TEST_P(FaultTest, EioOnWriteFailsThePutAndKeepsAdmitting) {
  auto store = Open();
  fault_->AddRule({FaultKind::kEio, IoOp::kWrite, {2}});
  Fill(*store, 2);
  EXPECT_EQ(store->Put(2, PageBytes(2, kLen)).code(), StatusCode::kIoError);
  EXPECT_FALSE(store->Contains(2));
  EXPECT_TRUE(store->admitting());
  EXPECT_TRUE(store->Put(2, PageBytes(2, kLen)).ok());
  EXPECT_EQ(store->pages(), 3u);
}

TEST_P(FaultTest, CorruptReadIsDataLossAndNoBytesReachTheCaller) {
  auto store = Open();
  Fill(*store, 30);
  fault_->AddRule({FaultKind::kCorrupt, IoOp::kRead, {}, 5});  // every 5th read
  EXPECT_EQ(ReadAll(*store, 30, StatusCode::kDataLoss).size(), 6u);
  EXPECT_EQ(store->stats().errors(TierError::kDataLoss), 6u);
  EXPECT_EQ(store->stats().Snapshot().reads, 24u);
}

TEST_P(FaultTest, CorruptWriteIsCaughtOnReadAndDroppedAtReopen) {
  {
    auto store = Open();
    fault_->AddRule({FaultKind::kCorrupt, IoOp::kWrite, {4}});
    Fill(*store, 10);  // write 4 (page 4) lands corrupt on disk; the Put itself cannot know
    std::vector<std::byte> got(4096);
    EXPECT_EQ(store->Read(4, got).status().code(), StatusCode::kDataLoss);
    EXPECT_TRUE(store->Read(5, got).ok());
  }
  auto store = Open();
  EXPECT_EQ(store->open_report().pages_dropped, 1u);
  EXPECT_FALSE(store->Contains(4));
  EXPECT_EQ(store->pages(), 9u);
}

TEST_P(FaultTest, ShortReadIsDataLoss) {
  auto store = Open();
  Fill(*store, 20);
  fault_->AddRule({FaultKind::kShortRead, std::nullopt, {0, 1, 2}});
  EXPECT_EQ(ReadAll(*store, 20, StatusCode::kDataLoss).size(), 3u);
  EXPECT_EQ(fault_->injected().short_read, 3u);
}

TEST_P(FaultTest, EnospcStopsAdmissionAndKeepsPagesReadable) {
  auto store = Open();
  Fill(*store, 25);
  fault_->AddRule({FaultKind::kEnospc, IoOp::kWrite, {25}});
  Status s = store->Put(25, PageBytes(25, kLen));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_FALSE(store->admitting());
  EXPECT_EQ(store->stats().errors(TierError::kNoSpace), 1u);
  // No more writes are even tried: the queue sees no further write.
  EXPECT_EQ(store->Put(26, PageBytes(26, kLen)).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(fault_->injected().enospc, 1u);
  EXPECT_TRUE(ReadAll(*store, 25, StatusCode::kOk).empty());
  std::vector<Status> batch = store->PutMany(std::vector<ColdStore::PutRequest>(3, {30, PageBytes(30, 10)}));
  for (const Status& b : batch) EXPECT_EQ(b.code(), StatusCode::kResourceExhausted);
  store->ResumeAdmission();  // the manager freed space
  EXPECT_TRUE(store->Put(26, PageBytes(26, kLen)).ok());
  EXPECT_EQ(store->pages(), 26u);
}

TEST_P(FaultTest, EnospcInTheMiddleOfABatch) {
  auto store = Open();
  fault_->AddRule({FaultKind::kEnospc, IoOp::kWrite, {5}});
  std::vector<std::vector<std::byte>> bytes;
  for (uint64_t id = 0; id < 40; ++id) bytes.push_back(PageBytes(id, kLen));
  std::vector<ColdStore::PutRequest> reqs;
  for (uint64_t id = 0; id < 40; ++id) reqs.push_back({id, bytes[id]});
  std::vector<Status> results = store->PutMany(reqs);
  size_t ok = 0;
  for (const Status& r : results) {
    if (r.ok())
      ++ok;
    else
      EXPECT_EQ(r.code(), StatusCode::kResourceExhausted);
  }
  EXPECT_FALSE(store->admitting());
  EXPECT_EQ(store->pages(), ok);
  EXPECT_GE(ok, 5u);
  EXPECT_LT(ok, 40u);
  for (uint64_t id = 0; id < 40; ++id) EXPECT_EQ(store->Contains(id), results[id].ok()) << id;
}

TEST_P(FaultTest, AddedLatencyShowsInTheReadLatency) {
  auto store = Open();
  Fill(*store, 4);
  fault_->AddRule({FaultKind::kLatency, IoOp::kRead, {}, 1, 0.0, 30'000});  // every read, 30 ms
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(ReadAll(*store, 4, StatusCode::kOk).empty());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(seconds, 0.030);
  EXPECT_LT(seconds, 2.0);  // the four reads overlap; generous for loaded machines
  TierStatsSnapshot s = store->stats().Snapshot();
  EXPECT_EQ(s.read_latency_count, 4u);
  EXPECT_GE(s.read_latency_sum_seconds, 4 * 0.030);
  EXPECT_EQ(s.read_latency_buckets[10], 4u);  // (25 ms, 100 ms]
}

// WakeReads, from another thread, ends a WaitReads that a slow read holds, so that the waiting thread can
// submit more; the slow read still arrives later.
TEST_P(FaultTest, WakeReadsEndsAWaitForASlowRead) {
  auto store = Open();
  Fill(*store, 2);
  fault_->AddRule({FaultKind::kLatency, IoOp::kRead, {0}, 0, 0.0, 2'000'000});  // the first read: 2 s
  std::vector<std::byte> dest(4096);
  const ColdStore::ReadRequest req{1, dest, 1};
  ASSERT_TRUE(store->SubmitReads({&req, 1}).ok());
  std::thread waker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    store->WakeReads();
  });
  std::vector<ColdStore::ReadResult> results;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(store->WaitReads(&results, 1).ok());
  const double woken = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  waker.join();
  EXPECT_TRUE(results.empty());
  EXPECT_LT(woken, 1.0);
  EXPECT_TRUE(store->WaitReads(&results, 1).ok());
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(results[0].status.ok()) << results[0].status.ToString();
  EXPECT_GE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.9);
  EXPECT_EQ(std::memcmp(dest.data(), PageBytes(1, kLen).data(), kLen), 0);
}

TEST_P(FaultTest, ProbabilityIsRepeatableForASeed) {
  std::set<uint64_t> first, second;
  for (int run = 0; run < 2; ++run) {
    auto store = Open(1234, "cold" + std::to_string(run));
    Fill(*store, 200);
    fault_->AddRule({FaultKind::kEio, IoOp::kRead, {}, 0, 0.25});
    (run == 0 ? first : second) = ReadAll(*store, 200, StatusCode::kIoError);
  }
  EXPECT_EQ(first, second);
  EXPECT_GT(first.size(), 20u);  // about 50 of 200
  EXPECT_LT(first.size(), 90u);
}

INSTANTIATE_TEST_SUITE_P(Backends, FaultTest, ::testing::Values("io_uring", "pread"), testing::BackendName);

}  // namespace
}  // namespace tq::storage
