#include "storage/uring_queue.h"

#include <liburing.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <utility>

namespace tq::storage {
namespace {

class UringQueue final : public IoQueue {
 public:
  explicit UringQueue(uint32_t depth) : depth_(depth), slots_(depth) {
    free_slots_.reserve(depth);
    for (uint32_t i = depth; i > 0; --i) free_slots_.push_back(i - 1);
  }

  ~UringQueue() override {
    // Requests still in the kernel write into caller buffers; drain them before the ring goes away.
    std::vector<IoCompletion> sink;
    if (!initialized_) return;
    if (outstanding_ > 0) Wait(&sink, outstanding_, 10'000).IgnoreError();
    if (wake_armed_) {  // the kernel holds a read into wake_count_: complete it before the ring goes away
      Wake();
      while (wake_armed_) {
        io_uring_cqe* cqe = nullptr;
        __kernel_timespec ts{1, 0};
        if (io_uring_wait_cqe_timeout(&ring_, &cqe, &ts) < 0) break;
        Poll(&sink);
      }
    }
    io_uring_queue_exit(&ring_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  Status Init() {
    // COOP_TASKRUN: completions are run when the task enters the kernel anyway, not by interrupting it
    // (Linux 5.19); older kernels refuse the flag with EINVAL and get a plain ring.
    // One entry more than the depth: the read of the wake eventfd.
    int rc = io_uring_queue_init(depth_ + 1, &ring_, IORING_SETUP_COOP_TASKRUN);
    if (rc == -EINVAL) rc = io_uring_queue_init(depth_ + 1, &ring_, 0);
    if (rc < 0) return ErrnoToStatus(-rc, "io_uring_queue_init");
    initialized_ = true;
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC);
    if (wake_fd_ < 0) return ErrnoToStatus(errno, "eventfd");
    return Status::Ok();
  }

  std::string_view name() const override { return "io_uring"; }
  uint32_t depth() const override { return depth_; }
  uint32_t outstanding() const override { return outstanding_.load(std::memory_order_relaxed); }

  Status RegisterFiles(std::span<const int> fds) override {
    fds_.assign(fds.begin(), fds.end());
    if (fds.empty()) return Status::Ok();
    int rc = io_uring_register_files(&ring_, fds_.data(), static_cast<unsigned>(fds_.size()));
    fixed_files_ = rc == 0;
    if (rc < 0) spdlog::warn("io_uring: file registration refused ({}); using plain fds", -rc);
    return Status::Ok();
  }

  Status RegisterBuffers(std::span<const iovec> regions) override {
    if (regions.empty()) return Status::Ok();
    int rc = io_uring_register_buffers(&ring_, regions.data(), static_cast<unsigned>(regions.size()));
    if (rc < 0) {
      spdlog::warn("io_uring: buffer registration refused ({}); using unregistered buffers", -rc);
      return Status::Ok();
    }
    regions_.clear();
    for (size_t i = 0; i < regions.size(); ++i) {
      auto base = reinterpret_cast<uintptr_t>(regions[i].iov_base);
      regions_.push_back({base, base + regions[i].iov_len, static_cast<int>(i)});
    }
    std::sort(regions_.begin(), regions_.end(),
              [](const Region& a, const Region& b) { return a.begin < b.begin; });
    return Status::Ok();
  }

  Status Enqueue(const IoRequest& request) override {
    if (free_slots_.empty()) return ResourceExhaustedError("io queue full");
    if (request.file >= fds_.size()) return InvalidArgumentError("io request names an unregistered file");
    uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    slots_[slot] = request;
    pending_.push_back(slot);
    outstanding_.fetch_add(1, std::memory_order_relaxed);
    return Status::Ok();
  }

  Status Submit() override {
    TQ_RETURN_IF_ERROR(PrepareAll());
    if (io_uring_sq_ready(&ring_) == 0) return Status::Ok();
    for (;;) {
      int rc = io_uring_submit(&ring_);
      if (rc >= 0) return Status::Ok();
      if (rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) return ErrnoToStatus(-rc, "io_uring_submit");
      // EAGAIN/EBUSY: the kernel wants completions reaped first; they stay in the CQ ring for Poll.
      io_uring_cqe* cqe = nullptr;
      io_uring_wait_cqe(&ring_, &cqe);
    }
  }

  size_t Poll(std::vector<IoCompletion>* out) override {
    io_uring_cqe* cqes[64];
    size_t total = 0;
    for (;;) {
      unsigned n = io_uring_peek_batch_cqe(&ring_, cqes, 64);
      for (unsigned i = 0; i < n; ++i) total += Complete(cqes[i], out) ? 1 : 0;
      io_uring_cq_advance(&ring_, n);
      if (n < 64) return total;
    }
  }

  void Wake() override {
    const uint64_t one = 1;
    // Never blocks: the counter would have to reach 2^64 - 1.
    [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
  }

  Status Wait(std::vector<IoCompletion>* out, size_t min_count, int timeout_ms) override {
    size_t got = Poll(out);
    if (TakeWake()) return Submit();
    // Before blocking, a read of the wake eventfd goes to the kernel: Wake() completes it.
    if (got < min_count && outstanding_ > 0 && !wake_armed_) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) return InternalError("io_uring submission queue full");
      io_uring_prep_read(sqe, wake_fd_, &wake_count_, sizeof wake_count_, 0);
      io_uring_sqe_set_data64(sqe, kWakeTag);
      wake_armed_ = true;
    }
    if (got == 0 && min_count > 0 && timeout_ms < 0 && !pending_.empty()) {
      // One system call submits the batch and waits for the first completion.
      TQ_RETURN_IF_ERROR(PrepareAll());
      int rc;
      do {
        rc = io_uring_submit_and_wait(&ring_, 1);
      } while (rc == -EINTR);
      // EAGAIN/EBUSY: the kernel wants completions reaped first; Submit below retries.
      if (rc < 0 && rc != -EAGAIN && rc != -EBUSY) return ErrnoToStatus(-rc, "io_uring_submit_and_wait");
      got = Poll(out);
    }
    TQ_RETURN_IF_ERROR(Submit());
    if (TakeWake()) return Status::Ok();
    while (got < min_count && outstanding_ > 0) {
      io_uring_cqe* cqe = nullptr;
      int rc;
      if (timeout_ms < 0) {
        rc = io_uring_wait_cqe(&ring_, &cqe);
      } else {
        __kernel_timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1'000'000LL};
        rc = io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
        if (rc == -ETIME) return DeadlineExceededError("io wait timed out");
      }
      if (rc < 0 && rc != -EINTR) return ErrnoToStatus(-rc, "io_uring_wait_cqe");
      got += Poll(out);
      if (TakeWake()) break;
    }
    return Status::Ok();
  }

 private:
  struct Region {
    uintptr_t begin, end;
    int index;
  };

  // Index of the registered buffer holding [buf, buf + length), or -1.
  int FixedBufferIndex(const void* buf, uint32_t length) const {
    auto p = reinterpret_cast<uintptr_t>(buf);
    auto it = std::upper_bound(regions_.begin(), regions_.end(), p,
                               [](uintptr_t v, const Region& r) { return v < r.begin; });
    if (it == regions_.begin()) return -1;
    --it;
    return p + length <= it->end ? it->index : -1;
  }

  // Moves the enqueued requests into submission queue entries.
  Status PrepareAll() {
    for (uint32_t slot : pending_) {
      // Never null: at most depth_ requests are outstanding and the ring has >= depth_ entries.
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) return InternalError("io_uring submission queue full");
      Prepare(sqe, slots_[slot]);
      io_uring_sqe_set_data64(sqe, slot);
    }
    pending_.clear();
    return Status::Ok();
  }

  void Prepare(io_uring_sqe* sqe, const IoRequest& r) {
    int fd = fixed_files_ ? static_cast<int>(r.file) : fds_[r.file];
    int buf_index = FixedBufferIndex(r.buf, r.length);
    if (r.op == IoOp::kRead) {
      if (buf_index >= 0)
        io_uring_prep_read_fixed(sqe, fd, r.buf, r.length, r.offset, buf_index);
      else
        io_uring_prep_read(sqe, fd, r.buf, r.length, r.offset);
    } else {
      if (buf_index >= 0)
        io_uring_prep_write_fixed(sqe, fd, r.buf, r.length, r.offset, buf_index);
      else
        io_uring_prep_write(sqe, fd, r.buf, r.length, r.offset);
    }
    if (fixed_files_) sqe->flags |= IOSQE_FIXED_FILE;
  }

  // True for a request's completion (appended to out), false for the wake eventfd's.
  bool Complete(io_uring_cqe* cqe, std::vector<IoCompletion>* out) {
    if (io_uring_cqe_get_data64(cqe) == kWakeTag) {
      wake_armed_ = false;
      woken_ = true;
      return false;
    }
    auto slot = static_cast<uint32_t>(io_uring_cqe_get_data64(cqe));
    const IoRequest& r = slots_[slot];
    out->push_back(IoCompletion{r.user_data, r.op, static_cast<uint32_t>(std::max(cqe->res, 0)),
                                CompletionStatus(r.op, cqe->res, r.length)});
    free_slots_.push_back(slot);
    outstanding_.fetch_sub(1, std::memory_order_relaxed);
    return true;
  }

  bool TakeWake() { return std::exchange(woken_, false); }

  static constexpr uint64_t kWakeTag = UINT64_MAX;  // user_data of the wake eventfd's read

  const uint32_t depth_;
  io_uring ring_{};
  bool initialized_ = false;
  std::vector<int> fds_;
  bool fixed_files_ = false;
  std::vector<Region> regions_;   // registered buffers, sorted by begin
  std::vector<IoRequest> slots_;  // [depth_]: the request behind each sqe's user_data
  std::vector<uint32_t> free_slots_;
  std::vector<uint32_t> pending_;  // enqueued slots not yet submitted
  std::atomic<uint32_t> outstanding_{0};
  int wake_fd_ = -1;          // eventfd that Wake() writes
  uint64_t wake_count_ = 0;   // the armed read's destination
  bool wake_armed_ = false;   // a read of wake_fd_ is in the kernel
  bool woken_ = false;        // its completion arrived and no Wait has returned for it yet
};

}  // namespace

StatusOr<std::unique_ptr<IoQueue>> MakeUringQueue(const IoQueueOptions& options) {
  if (options.queue_depth == 0) return InvalidArgumentError("io queue depth must be >= 1");
  if (options.queue_depth > 32768) return InvalidArgumentError("io_uring queue depth must be <= 32768");
  auto queue = std::make_unique<UringQueue>(options.queue_depth);
  TQ_RETURN_IF_ERROR(queue->Init());
  return std::unique_ptr<IoQueue>(std::move(queue));
}

}  // namespace tq::storage
