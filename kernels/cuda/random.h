// Seeded pseudo-random fill of device memory, for benchmarks and synthetic KV (not for anything that needs
// statistical quality beyond "looks Gaussian").
#pragma once

#include <cstdint>

#include "common/status.h"
#include "kernels/cuda/runtime.h"

namespace tq::gpu {

// x[i] = scale * N(0, 1) draws (Box-Muller on a counter-based hash of (seed, i)), i in [0, n).
Status FillNormal(float* x, int64_t n, uint64_t seed, float scale, cudaStream_t stream);

}  // namespace tq::gpu
