// The one place that knows which SIMD instruction sets the CPU kernels were compiled for and which one runs.
// Kernels are written once with Google Highway and compiled for each target in HWY_TARGETS; the best target the
// CPU supports is chosen once at run time by Highway's dynamic dispatch (HWY_DYNAMIC_DISPATCH at coarse entry points).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tq::kernels {

// Names of the targets compiled into this binary, best first, e.g. {"AVX3", "AVX2", "SSE4", "EMU128"}.
std::vector<std::string> CompiledSimdTargets();

// Name of the target that dynamic dispatch uses on this CPU, e.g. "AVX2".
std::string ActiveSimdTarget();

// Caps dynamic dispatch at the target `name` (one of CompiledSimdTargets(), any case): kernels then run the
// best compiled target that is no better than it and that the CPU supports. "auto" undoes a cap. For A/B
// measurements on one machine (the AVX2 kernels on an AVX-512 CPU) and for CPUs that slow down on wide
// vectors. Call it before kernels run. InvalidArgument for a name not compiled in; FailedPrecondition when
// the CPU lacks that target.
Status LimitSimdTarget(std::string_view name);

}  // namespace tq::kernels
