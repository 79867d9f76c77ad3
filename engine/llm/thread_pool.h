// A fixed pool of worker threads for the forward pass. ParallelFor cuts [0, n) into contiguous chunks that the
// caller's thread and the workers claim one at a time; it returns when every chunk is done. A worker the OS has
// not scheduled yet claims nothing and is never waited for, so a busy machine costs at most the chunks in
// flight, not a time slice per call. Workers spin briefly before they sleep, since a forward pass issues a few
// hundred short ParallelFor calls per token.
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

  // fn(begin, end, thread_index) for disjoint ranges covering [0, n); thread_index in [0, size()) names the
  // thread running the range. Not reentrant: call from one thread at a time.
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn);

 private:
  void WorkerLoop(int index);
  // Claims and runs chunks of job `generation` until none is left.
  void RunChunks(uint32_t generation, int index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::atomic<uint32_t> generation_{0};
  // (generation << 32) | next chunk index: claiming with a compare-exchange on the whole word means a worker
  // that wakes late can never take a chunk of a later job.
  std::atomic<uint64_t> claim_{0};
  std::atomic<int64_t> done_{0};  // chunks finished in the current job
  bool stop_ = false;
  const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
  int64_t job_n_ = 0;
  // Chunks of the current job. Atomic because a late worker may compare against it while the next job sets it;
  // the compare-exchange on claim_ decides, and job_ / job_n_ are read only after a successful claim.
  std::atomic<int64_t> chunks_{0};
};

}  // namespace tq::engine
