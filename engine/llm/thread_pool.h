// A fixed pool of worker threads for the forward pass. ParallelFor splits [0, n) into one contiguous range per
// thread (the caller's thread takes part) and returns when all ranges are done. Workers spin briefly before they
// sleep, since a forward pass issues a few hundred short ParallelFor calls per token.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tq::engine {

class ThreadPool {
 public:
  // `threads` includes the caller; 0 = std::thread::hardware_concurrency().
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // fn(begin, end, thread_index) for disjoint ranges covering [0, n); thread_index in [0, size()).
  // Not reentrant: call from one thread at a time.
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn);

 private:
  void WorkerLoop(int index);
  void RunShare(int index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  bool stop_ = false;
  const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
  int64_t job_n_ = 0;
};

}  // namespace tq::engine
