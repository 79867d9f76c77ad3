// The cold tier's I/O queue: a small interface in the style of NIXL's POSIX plugin.
//
// A caller enqueues reads and writes of whole buffers at byte offsets of registered files, submits them in
// one batch (Submit), and collects completions (Poll without blocking, Wait with a minimum count). Every
// request ends in exactly one IoCompletion carrying its own Status:
//   - the OS error as ErrnoToStatus (ENOSPC -> resource_exhausted, EIO -> io_error, ...),
//   - a short read (fewer bytes than asked, e.g. past the end of the file) -> data_loss,
//   - a short write (the file system ran out of space part way) -> resource_exhausted.
// Backends are chosen by name (MakeIoQueue): "io_uring", "pread" (a pread/pwrite thread pool) or "auto"
// (io_uring, falling back to pread when the kernel or a seccomp profile refuses io_uring).
//
// Threading: one thread drives a queue (Enqueue/Submit/Poll/Wait); counters may be read and Wake called from
// any thread.
// Buffers and files must stay valid until their requests complete.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tq::storage {

// Alignment of buffers, offsets and lengths for O_DIRECT (bytes). 4096 covers every block device in use.
inline constexpr size_t kIoAlignment = 4096;

enum class IoOp : uint8_t { kRead, kWrite };

struct IoRequest {
  IoOp op = IoOp::kRead;
  uint32_t file = 0;       // index into the files given to RegisterFiles
  uint64_t offset = 0;     // bytes from the start of the file; kIoAlignment-aligned for O_DIRECT files
  void* buf = nullptr;     // kIoAlignment-aligned for O_DIRECT files
  uint32_t length = 0;     // bytes; a multiple of kIoAlignment for O_DIRECT files
  uint64_t user_data = 0;  // returned untouched in the completion
};

struct IoCompletion {
  uint64_t user_data = 0;
  IoOp op = IoOp::kRead;
  uint32_t bytes = 0;  // bytes transferred (may be < length when status is not OK)
  Status status;
};

struct IoQueueOptions {
  std::string backend = "auto";  // "io_uring", "pread" or "auto"
  uint32_t queue_depth = 64;     // most requests enqueued or in flight at once; >= 1
  uint32_t threads = 0;          // pread backend: worker threads; 0 = min(queue_depth, 64)
};

class IoQueue {
 public:
  virtual ~IoQueue() = default;

  // "io_uring" or "pread" (the fault-injecting wrapper names itself "fault(<inner>)").
  virtual std::string_view name() const = 0;
  virtual uint32_t depth() const = 0;
  // Requests enqueued and not yet returned by Poll/Wait.
  virtual uint32_t outstanding() const = 0;

  // Files every request refers to by index. Called once, before the first Enqueue; the fds stay owned by the
  // caller. io_uring registers them with the ring (fixed files) where the kernel allows.
  virtual Status RegisterFiles(std::span<const int> fds) = 0;
  // Memory regions that requests' buffers will lie in. io_uring registers them (fixed buffers) and uses the
  // fixed read/write ops for any request inside one. Optional; failure to register only costs speed (logged).
  virtual Status RegisterBuffers(std::span<const iovec> regions) = 0;

  // Queues a request for the next Submit. resource_exhausted when outstanding() == depth(): poll first.
  virtual Status Enqueue(const IoRequest& request) = 0;
  // Hands every enqueued request to the kernel (io_uring) or the workers (pread) in one batch.
  virtual Status Submit() = 0;
  // Appends the completions that are ready, without blocking; returns how many were appended.
  virtual size_t Poll(std::vector<IoCompletion>* out) = 0;
  // Blocks until at least min(min_count, outstanding) completions were appended (submitting first if needed).
  // timeout_ms < 0 waits without limit; on timeout returns deadline_exceeded with what arrived appended.
  virtual Status Wait(std::vector<IoCompletion>* out, size_t min_count, int timeout_ms = -1) = 0;
  // Any thread: the Wait now blocked, or else the next Wait, returns early with OK and whatever completions
  // are ready (perhaps none), so that its thread can hand new requests over. Wakes do not add up: several
  // before a Wait end that one Wait.
  virtual void Wake() = 0;
};

// "io_uring", "pread" or "auto" (io_uring, else pread; the choice and the reason are logged).
StatusOr<std::unique_ptr<IoQueue>> MakeIoQueue(const IoQueueOptions& options);

// Status of a finished request from the raw result (bytes, or -errno) and the length asked for.
Status CompletionStatus(IoOp op, int64_t result, uint32_t length);

// A file opened for the cold tier. `direct` tells whether O_DIRECT is in effect.
struct IoFile {
  int fd = -1;
  bool direct = false;
};

// Opens (creating if asked) `path` read-write, with O_DIRECT when `want_direct`; when the file system refuses
// O_DIRECT (EINVAL, e.g. tmpfs on older kernels) it reopens buffered and logs it once per call.
StatusOr<IoFile> OpenIoFile(const std::string& path, bool create, bool want_direct);

// A heap buffer aligned to kIoAlignment, zero-filled, freed on destruction.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return data_ == nullptr; }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

inline constexpr uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace tq::storage
