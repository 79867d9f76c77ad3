// Backend in builds without CUDA (TQ_ENABLE_CUDA=OFF): there is no GPU path to create.
#include "engine/gpu/backend.h"

namespace tq::gpu {

StatusOr<std::unique_ptr<Backend>> Backend::Create(const engine::Model&, const GpuModelOptions& options) {
  TQ_RETURN_IF_ERROR(CheckGpuModelOptions(options));  // bad options are named first, as with CUDA
  return UnavailableError(
      "this tqserve was built without CUDA (TQ_ENABLE_CUDA=OFF): the engine runs on the CPU only");
}

}  // namespace tq::gpu
