// The same functional tests against the io_uring and the pread backends.
#include "storage/io_queue.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>

#include "storage_test_util.h"

namespace tq::storage {
namespace {

class IoQueueTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { TQ_SKIP_IF_NO_BACKEND(GetParam()); }
  std::unique_ptr<IoQueue> Make(uint32_t depth) {
    StatusOr<std::unique_ptr<IoQueue>> q = MakeIoQueue(IoQueueOptions{GetParam(), depth});
    EXPECT_TRUE(q.ok()) << q.status().ToString();
    EXPECT_EQ((*q)->name(), GetParam());
    return std::move(q).value();
  }
  testing::TempDir dir_;
};

TEST_P(IoQueueTest, WriteThenReadManyBlocksAtEachDepth) {
  for (uint32_t depth : {1u, 8u, 32u, 128u}) {
    SCOPED_TRACE("depth " + std::to_string(depth));
    StatusOr<IoFile> file = OpenIoFile(dir_.path() + "/q" + std::to_string(depth), true, true);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    std::unique_ptr<IoQueue> q = Make(depth);
    ASSERT_TRUE(q->RegisterFiles({&file->fd, 1}).ok());
    constexpr uint32_t kBlocks = 300, kBlock = 8192;
    AlignedBuffer src(uint64_t{kBlocks} * kBlock), dst(uint64_t{kBlocks} * kBlock);
    for (uint32_t b = 0; b < kBlocks; ++b) {
      auto bytes = testing::PageBytes(b, kBlock);
      std::memcpy(src.data() + uint64_t{b} * kBlock, bytes.data(), kBlock);
    }
    iovec regions[] = {{src.data(), src.size()}, {dst.data(), dst.size()}};
    ASSERT_TRUE(q->RegisterBuffers(regions).ok());

    // Writes, then reads in a random order, each with at most `depth` requests outstanding.
    std::vector<uint32_t> order(kBlocks);
    std::iota(order.begin(), order.end(), 0u);
    for (IoOp op : {IoOp::kWrite, IoOp::kRead}) {
      std::shuffle(order.begin(), order.end(), std::mt19937(depth));
      std::vector<IoCompletion> done;
      size_t next = 0, finished = 0;
      while (finished < kBlocks) {
        while (next < kBlocks && q->outstanding() < q->depth()) {
          uint32_t b = order[next++];
          std::byte* buf = (op == IoOp::kWrite ? src.data() : dst.data()) + uint64_t{b} * kBlock;
          ASSERT_TRUE(q->Enqueue({op, 0, uint64_t{b} * kBlock, buf, kBlock, b}).ok());
        }
        done.clear();
        ASSERT_TRUE(q->Wait(&done, 1).ok());
        for (const IoCompletion& c : done) {
          ASSERT_TRUE(c.status.ok()) << c.status.ToString();
          EXPECT_EQ(c.bytes, kBlock);
          EXPECT_EQ(c.op, op);
        }
        finished += done.size();
      }
      EXPECT_EQ(q->outstanding(), 0u);
    }
    EXPECT_EQ(std::memcmp(src.data(), dst.data(), src.size()), 0);
    ::close(file->fd);
  }
}

TEST_P(IoQueueTest, ShortReadPastEndIsDataLoss) {
  StatusOr<IoFile> file = OpenIoFile(dir_.path() + "/short", true, true);
  ASSERT_TRUE(file.ok());
  std::unique_ptr<IoQueue> q = Make(4);
  ASSERT_TRUE(q->RegisterFiles({&file->fd, 1}).ok());
  AlignedBuffer buf(4096);
  ASSERT_TRUE(q->Enqueue({IoOp::kWrite, 0, 0, buf.data(), 4096, 1}).ok());
  std::vector<IoCompletion> done;
  ASSERT_TRUE(q->Wait(&done, 1).ok());
  ASSERT_TRUE(done[0].status.ok());
  AlignedBuffer two(8192);
  ASSERT_TRUE(q->Enqueue({IoOp::kRead, 0, 0, two.data(), 8192, 2}).ok());      // half exists
  ASSERT_TRUE(q->Enqueue({IoOp::kRead, 0, 65536, buf.data(), 4096, 3}).ok());  // none exists
  done.clear();
  ASSERT_TRUE(q->Wait(&done, 2).ok());
  ASSERT_EQ(done.size(), 2u);
  for (const IoCompletion& c : done) EXPECT_EQ(c.status.code(), StatusCode::kDataLoss) << c.status.ToString();
  ::close(file->fd);
}

TEST_P(IoQueueTest, PerRequestErrorsAndFullQueue) {
  const std::string path = dir_.path() + "/ro";
  {
    StatusOr<IoFile> f = OpenIoFile(path, true, false);
    ASSERT_TRUE(f.ok());
    ::close(f->fd);
  }
  int ro = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(ro, 0);
  std::unique_ptr<IoQueue> q = Make(2);
  ASSERT_TRUE(q->RegisterFiles({&ro, 1}).ok());
  AlignedBuffer buf(4096);
  ASSERT_TRUE(q->Enqueue({IoOp::kWrite, 0, 0, buf.data(), 4096, 7}).ok());
  ASSERT_TRUE(q->Enqueue({IoOp::kWrite, 0, 4096, buf.data(), 4096, 8}).ok());
  EXPECT_EQ(q->Enqueue({IoOp::kWrite, 0, 8192, buf.data(), 4096, 9}).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(q->Enqueue({IoOp::kRead, 5, 0, buf.data(), 4096, 9}).code(), StatusCode::kResourceExhausted);
  std::vector<IoCompletion> done;
  ASSERT_TRUE(q->Wait(&done, 2).ok());
  ASSERT_EQ(done.size(), 2u);
  for (const IoCompletion& c : done) EXPECT_EQ(c.status.code(), StatusCode::kIoError) << c.status.ToString();
  EXPECT_EQ(q->Enqueue({IoOp::kRead, 5, 0, buf.data(), 4096, 9}).code(), StatusCode::kInvalidArgument);
  ::close(ro);
}

TEST_P(IoQueueTest, WaitTimesOutWithNothingDue) {
  std::unique_ptr<IoQueue> q = Make(2);
  std::vector<IoCompletion> done;
  EXPECT_TRUE(q->Wait(&done, 1, 10).ok());  // nothing outstanding: returns at once
  EXPECT_TRUE(done.empty());
}

// Wake ends a Wait that nothing else would end: io_uring's read of an empty pipe stays in flight until data
// comes. (pread cannot block on a pipe: pread on it fails with ESPIPE; its Wake is tested through FaultQueue.)
TEST(IoQueueWake, WakeEndsAWaitBlockedOnARequestThatDoesNotComplete) {
  TQ_SKIP_IF_NO_BACKEND("io_uring");
  StatusOr<std::unique_ptr<IoQueue>> q = MakeIoQueue(IoQueueOptions{"io_uring", 4});
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ASSERT_TRUE((*q)->RegisterFiles({&fds[0], 1}).ok());
  char buf[16];
  ASSERT_TRUE((*q)->Enqueue({IoOp::kRead, 0, 0, buf, sizeof buf, 5}).ok());
  std::thread waker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    (*q)->Wake();
  });
  std::vector<IoCompletion> done;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE((*q)->Wait(&done, 1).ok());
  waker.join();
  EXPECT_TRUE(done.empty());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  // A wake before the Wait ends that Wait (once): the next one waits for the request again.
  (*q)->Wake();
  EXPECT_TRUE((*q)->Wait(&done, 1).ok());
  EXPECT_TRUE(done.empty());
  ASSERT_EQ(::write(fds[1], "0123456789abcdef", 16), 16);
  EXPECT_TRUE((*q)->Wait(&done, 1).ok());
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].user_data, 5u);
  EXPECT_EQ(done[0].bytes, 16u);
  EXPECT_EQ(std::string(buf, 16), "0123456789abcdef");
  q->reset();
  ::close(fds[0]);
  ::close(fds[1]);
}

INSTANTIATE_TEST_SUITE_P(Backends, IoQueueTest, ::testing::Values("io_uring", "pread"), testing::BackendName);

TEST(IoQueueFactory, NamesAndAuto) {
  EXPECT_EQ(MakeIoQueue(IoQueueOptions{"spdk", 8}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeIoQueue(IoQueueOptions{"pread", 0}).status().code(), StatusCode::kInvalidArgument);
  StatusOr<std::unique_ptr<IoQueue>> q = MakeIoQueue(IoQueueOptions{"auto", 8});
  ASSERT_TRUE(q.ok());
  std::string why;
  EXPECT_EQ((*q)->name(), testing::UringAvailable(&why) ? "io_uring" : "pread");
}

TEST(IoQueueFactory, CompletionStatusMapping) {
  EXPECT_TRUE(CompletionStatus(IoOp::kRead, 4096, 4096).ok());
  EXPECT_EQ(CompletionStatus(IoOp::kRead, 100, 4096).code(), StatusCode::kDataLoss);
  EXPECT_EQ(CompletionStatus(IoOp::kWrite, 100, 4096).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(CompletionStatus(IoOp::kWrite, -ENOSPC, 4096).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(CompletionStatus(IoOp::kRead, -EIO, 4096).code(), StatusCode::kIoError);
}

}  // namespace
}  // namespace tq::storage
