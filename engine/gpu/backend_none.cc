// Backend in builds without CUDA (TQ_ENABLE_CUDA=OFF): there is no GPU path to create.
#include "engine/gpu/backend.h"

namespace tq::gpu {

StatusOr<std::unique_ptr<Backend>> Backend::Create(const engine::Model&, const BackendOptions&) {
  return UnavailableError(
      "this tqserve was built without CUDA (TQ_ENABLE_CUDA=OFF): the engine runs on the CPU only");
}

}  // namespace tq::gpu
