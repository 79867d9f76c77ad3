#include "engine/llm/thread_pool.h"

#include <algorithm>

namespace tq::engine {

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
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

void ThreadPool::RunChunks(uint32_t generation, int index) {
  for (;;) {
    uint64_t c = claim_.load(std::memory_order_acquire);
    int64_t chunk;
    do {
      if (static_cast<uint32_t>(c >> 32) != generation) return;
      chunk = static_cast<int64_t>(c & 0xffffffffu);
      if (chunk >= chunks_.load(std::memory_order_relaxed)) return;
    } while (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire));
    const int64_t chunks = chunks_.load(std::memory_order_relaxed);
    const int64_t begin = job_n_ * chunk / chunks;
    const int64_t end = job_n_ * (chunk + 1) / chunks;
    if (begin < end) (*job_)(begin, end, index);
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (workers_.empty() || n <= 1) {
    if (n > 0) fn(0, n, 0);
    return;
  }
  const uint32_t generation = generation_.load(std::memory_order_relaxed) + 1;
  job_ = &fn;
  job_n_ = n;
  const int64_t chunks = std::min<int64_t>(n, 4 * static_cast<int64_t>(size()));
  chunks_.store(chunks, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  claim_.store(static_cast<uint64_t>(generation) << 32, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.store(generation, std::memory_order_release);
  }
  wake_.notify_all();
  RunChunks(generation, 0);
  while (done_.load(std::memory_order_acquire) != chunks) std::this_thread::yield();
  // Close the job: a late worker's compare-exchange against an index of this generation can no longer succeed,
  // so it cannot run a chunk with the next job's fields.
  claim_.store((static_cast<uint64_t>(generation) << 32) | 0xffffffffu, std::memory_order_release);
}

void ThreadPool::WorkerLoop(int index) {
  uint32_t seen = 0;
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
    RunChunks(seen, index);
  }
}

}  // namespace tq::engine
