#include "storage/io_queue.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "storage/pread_queue.h"
#include "storage/uring_queue.h"

namespace tq::storage {

StatusOr<std::unique_ptr<IoQueue>> MakeIoQueue(const IoQueueOptions& options) {
  if (options.queue_depth == 0) return InvalidArgumentError("io queue depth must be >= 1");
  if (options.backend == "pread") return MakePreadQueue(options);
  if (options.backend == "io_uring") return MakeUringQueue(options);
  if (options.backend != "auto") {
    return InvalidArgumentError("unknown io backend '" + options.backend + "' (io_uring, pread, auto)");
  }
  StatusOr<std::unique_ptr<IoQueue>> uring = MakeUringQueue(options);
  if (uring.ok()) {
    spdlog::info("cold tier io backend: io_uring (auto, queue depth {})", options.queue_depth);
    return uring;
  }
  spdlog::warn("cold tier io backend: pread (auto; io_uring unavailable: {})", uring.status().ToString());
  return MakePreadQueue(options);
}

Status CompletionStatus(IoOp op, int64_t result, uint32_t length) {
  const char* what = op == IoOp::kRead ? "read" : "write";
  if (result < 0) return ErrnoToStatus(static_cast<int>(-result), what);
  if (static_cast<uint64_t>(result) == length) return Status::Ok();
  std::string message = std::string("short ") + what + ": " + std::to_string(result) + " of " +
                        std::to_string(length) + " bytes";
  if (op == IoOp::kRead) return DataLossError(std::move(message));
  return ResourceExhaustedError(message + " (file system full)");
}

StatusOr<IoFile> OpenIoFile(const std::string& path, bool create, bool want_direct) {
  // 0600 and no symbolic link: cold pages hold users' prompts.
  const int base = O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0);
  if (want_direct) {
    int fd = ::open(path.c_str(), base | O_DIRECT, 0600);
    if (fd >= 0) return IoFile{fd, true};
    if (errno != EINVAL) return ErrnoToStatus(errno, "open " + path);
    spdlog::info("cold tier: O_DIRECT refused for {} (file system does not support it); using buffered I/O",
                 path);
  }
  int fd = ::open(path.c_str(), base, 0600);
  if (fd < 0) return ErrnoToStatus(errno, "open " + path);
  return IoFile{fd, false};
}

AlignedBuffer::AlignedBuffer(size_t bytes) {
  if (bytes == 0) return;
  size_t rounded = AlignUp(bytes, kIoAlignment);
  data_ = static_cast<std::byte*>(std::aligned_alloc(kIoAlignment, rounded));
  // Allocation failure of a few MiB is not an expected outcome in this server: it is a bug or a dying
  // machine.
  assert(data_ != nullptr);
  if (data_ == nullptr) std::abort();
  std::memset(data_, 0, rounded);
  size_ = bytes;
}

AlignedBuffer::~AlignedBuffer() {
  std::free(data_);
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace tq::storage
