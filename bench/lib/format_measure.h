// Quality of a KV format on random Gaussian data, as `tqserve formats --measure` prints it.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "kernels/formats/format.h"

namespace tq::kernels {

struct FormatQuality {
  double mse = 0.0;     // mean over vectors of ||x - x^||^2 / ||x||^2
  double mse_nearest =
      0.0;              // the same with scale search off: the paper's quantizer (equals mse where unused)
  double ip_err = 0.0;  // d * mean((<q,x> - <q,x^>)^2) / mean(||q||^2 ||x||^2), q and x independent N(0, I)
  double ip_bias = 0.0; // mean(<q,x^> - <q,x>) / sqrt(mean(||q||^2 ||x||^2) / d)
};

// Encodes and decodes `vectors` Gaussian vectors (rounded up to whole pages) with the reference codec.
StatusOr<FormatQuality> MeasureFormat(KvFormat format, int head_dim, int vectors, uint64_t seed);

}  // namespace tq::kernels
