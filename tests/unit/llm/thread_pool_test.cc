#include "engine/llm/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace tq::engine {
namespace {

TEST(ThreadPoolTest, EveryIndexExactlyOnceOverManyJobs) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1000, 4097}) {
      for (int rep = 0; rep < 50; ++rep) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int> bad_thread{0};
        pool.ParallelFor(n, [&](int64_t begin, int64_t end, int t) {
          if (t < 0 || t >= threads) bad_thread = 1;
          for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n " << n << " i " << i;
        EXPECT_EQ(bad_thread.load(), 0);
      }
    }
  }
}

TEST(ThreadPoolTest, OversubscribedPoolStillFinishes) {
  // More threads than cores: some workers are not scheduled during a job, and the job must not wait for them.
  ThreadPool pool(16);
  int64_t total = 0;
  for (int rep = 0; rep < 2000; ++rep) {
    std::atomic<int64_t> sum{0};
    pool.ParallelFor(100, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) sum += i;
    });
    total += sum;
  }
  EXPECT_EQ(total, 2000 * 4950);
}

}  // namespace
}  // namespace tq::engine
