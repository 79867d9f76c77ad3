// Built instead of uring_queue.cc when liburing is not installed: "auto" then always picks pread.
#include "storage/uring_queue.h"

namespace tq::storage {

StatusOr<std::unique_ptr<IoQueue>> MakeUringQueue(const IoQueueOptions&) {
  return UnimplementedError("this build has no liburing");
}

}  // namespace tq::storage
