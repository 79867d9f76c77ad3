// IEEE binary16 helpers for the KV formats. The conversions themselves (exact, round to nearest even) live once,
// in kernels/weights/half.h; SIMD kernels use the hardware conversion, which gives the same results.
#pragma once

#include <cstdint>

#include "kernels/weights/half.h"

namespace tq::kernels {

// f rounded to the nearest half and back.
inline float RoundToHalf(float f) { return HalfToFloat(FloatToHalf(f)); }

}  // namespace tq::kernels
