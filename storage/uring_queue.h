// The io_uring backend of IoQueue (liburing >= 2.3): registered files and buffers, batched submission.
#pragma once

#include <memory>

#include "storage/io_queue.h"

namespace tq::storage {

// Sets up a ring of options.queue_depth entries. Fails with the ring's error (permission_denied for EPERM,
// io_error for ENOSYS, ...) when the kernel or a seccomp profile refuses io_uring, or when the build has no
// liburing (unimplemented).
StatusOr<std::unique_ptr<IoQueue>> MakeUringQueue(const IoQueueOptions& options);

}  // namespace tq::storage
