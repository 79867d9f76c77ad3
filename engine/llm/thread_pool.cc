#include "engine/llm/thread_pool.h"

#include <algorithm>

namespace tq::engine {

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunShare(int index) {
  const int64_t parts = size();
  const int64_t begin = job_n_ * index / parts;
  const int64_t end = job_n_ * (index + 1) / parts;
  if (begin < end) (*job_)(begin, end, index);
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (workers_.empty() || n <= 1) {
    if (n > 0) fn(0, n, 0);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  RunShare(0);
  while (pending_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  job_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin a little for the next job, then sleep.
    for (int spin = 0; spin < 20000 && generation_.load(std::memory_order_acquire) == seen; ++spin) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      if (stop_) return;
      seen = generation_.load(std::memory_order_acquire);
    }
    RunShare(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace tq::engine
