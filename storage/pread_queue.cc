#include "storage/pread_queue.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace tq::storage {
namespace {

// Reads or writes the whole range, continuing after partial transfers. Returns bytes moved, or -errno when a
// call failed (even after some bytes moved: the error is what the caller must see, e.g. ENOSPC part way).
int64_t TransferAll(int fd, const IoRequest& r) {
  auto* p = static_cast<std::byte*>(r.buf);
  uint64_t done = 0;
  while (done < r.length) {
    ssize_t n = r.op == IoOp::kRead
                    ? ::pread(fd, p + done, r.length - done, static_cast<off_t>(r.offset + done))
                    : ::pwrite(fd, p + done, r.length - done, static_cast<off_t>(r.offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (n == 0) break;  // end of file (read) or nothing written (write): reported as short
    done += static_cast<uint64_t>(n);
  }
  return static_cast<int64_t>(done);
}

class PreadQueue final : public IoQueue {
 public:
  PreadQueue(uint32_t depth, uint32_t threads) : depth_(depth) {
    workers_.reserve(threads);
    for (uint32_t i = 0; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  }

  ~PreadQueue() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  std::string_view name() const override { return "pread"; }
  uint32_t depth() const override { return depth_; }
  uint32_t outstanding() const override {
    std::lock_guard lock(mu_);
    return outstanding_;
  }

  Status RegisterFiles(std::span<const int> fds) override {
    std::lock_guard lock(mu_);
    fds_.assign(fds.begin(), fds.end());
    return Status::Ok();
  }
  Status RegisterBuffers(std::span<const iovec>) override { return Status::Ok(); }

  Status Enqueue(const IoRequest& request) override {
    std::lock_guard lock(mu_);
    if (outstanding_ >= depth_) return ResourceExhaustedError("io queue full");
    if (request.file >= fds_.size()) return InvalidArgumentError("io request names an unregistered file");
    pending_.push_back(request);
    ++outstanding_;
    return Status::Ok();
  }

  Status Submit() override {
    {
      std::lock_guard lock(mu_);
      if (pending_.empty()) return Status::Ok();
      for (const IoRequest& r : pending_) work_.push_back(r);
      pending_.clear();
    }
    work_cv_.notify_all();
    return Status::Ok();
  }

  size_t Poll(std::vector<IoCompletion>* out) override {
    std::lock_guard lock(mu_);
    return DrainLocked(out);
  }

  Status Wait(std::vector<IoCompletion>* out, size_t min_count, int timeout_ms) override {
    TQ_RETURN_IF_ERROR(Submit());
    std::unique_lock lock(mu_);
    size_t got = DrainLocked(out);
    auto enough = [&] { return got >= min_count || outstanding_ == 0; };
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
    auto ready = [&] { return !done_.empty() || woken_; };
    while (!enough() && !woken_) {
      if (timeout_ms < 0) {
        done_cv_.wait(lock, ready);
      } else if (!done_cv_.wait_until(lock, deadline, ready)) {
        return DeadlineExceededError("io wait timed out");
      }
      got += DrainLocked(out);
    }
    woken_ = false;
    return Status::Ok();
  }

  void Wake() override {
    {
      std::lock_guard lock(mu_);
      woken_ = true;
    }
    done_cv_.notify_all();
  }

 private:
  size_t DrainLocked(std::vector<IoCompletion>* out) {
    size_t n = done_.size();
    for (auto& c : done_) out->push_back(std::move(c));
    done_.clear();
    outstanding_ -= static_cast<uint32_t>(n);
    return n;
  }

  void WorkerLoop() {
    std::unique_lock lock(mu_);
    for (;;) {
      work_cv_.wait(lock, [&] { return stopping_ || !work_.empty(); });
      if (work_.empty()) return;  // stopping
      IoRequest r = work_.front();
      work_.pop_front();
      int fd = fds_[r.file];
      lock.unlock();
      int64_t result = TransferAll(fd, r);
      IoCompletion c{r.user_data, r.op, static_cast<uint32_t>(std::max<int64_t>(result, 0)),
                     CompletionStatus(r.op, result, r.length)};
      lock.lock();
      done_.push_back(std::move(c));
      done_cv_.notify_one();
    }
  }

  const uint32_t depth_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::vector<int> fds_;
  std::vector<IoRequest> pending_;  // enqueued, not yet submitted
  std::deque<IoRequest> work_;      // submitted, not yet picked by a worker
  std::vector<IoCompletion> done_;  // finished, not yet polled
  uint32_t outstanding_ = 0;        // pending_ + work_ + in workers + done_
  bool stopping_ = false;
  bool woken_ = false;  // Wake() was called since the last Wait returned
  std::vector<std::thread> workers_;
};

}  // namespace

StatusOr<std::unique_ptr<IoQueue>> MakePreadQueue(const IoQueueOptions& options) {
  if (options.queue_depth == 0) return InvalidArgumentError("io queue depth must be >= 1");
  uint32_t threads = options.threads != 0 ? options.threads : std::min<uint32_t>(options.queue_depth, 64);
  return std::unique_ptr<IoQueue>(std::make_unique<PreadQueue>(options.queue_depth, threads));
}

}  // namespace tq::storage
