// The pread/pwrite thread-pool backend of IoQueue: for kernels or containers where io_uring is refused.
#pragma once

#include <memory>

#include "storage/io_queue.h"

namespace tq::storage {

// Starts options.threads workers (0 = min(queue_depth, 64)). Never fails for valid options.
StatusOr<std::unique_ptr<IoQueue>> MakePreadQueue(const IoQueueOptions& options);

}  // namespace tq::storage
