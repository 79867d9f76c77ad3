// The one place that knows which SIMD instruction sets the CPU kernels were compiled for and which one runs.
// Kernels are written once with Google Highway and compiled for each target in HWY_TARGETS; the best target the
// CPU supports is chosen once at run time by Highway's dynamic dispatch (HWY_DYNAMIC_DISPATCH at coarse entry points).
#pragma once

#include <string>
#include <vector>

namespace tq::kernels {

// Names of the targets compiled into this binary, best first, e.g. {"AVX3", "AVX2", "SSE4", "EMU128"}.
std::vector<std::string> CompiledSimdTargets();

// Name of the target that dynamic dispatch uses on this CPU, e.g. "AVX2".
std::string ActiveSimdTarget();

}  // namespace tq::kernels
