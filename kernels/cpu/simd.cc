#include "kernels/cpu/simd.h"

#include <hwy/highway.h>
#include <hwy/targets.h>

namespace tq::kernels {

std::vector<std::string> CompiledSimdTargets() {
  std::vector<std::string> names;
  // HWY_TARGETS is a bit set; lower bits are better targets on x86.
  for (int64_t targets = HWY_TARGETS; targets != 0; targets &= targets - 1) {
    const int64_t bit = targets & (~targets + 1);
    names.emplace_back(hwy::TargetName(bit));
  }
  return names;
}

std::string ActiveSimdTarget() {
  const int64_t supported = hwy::SupportedTargets() & HWY_TARGETS;
  if (supported == 0) return hwy::TargetName(HWY_STATIC_TARGET);
  return hwy::TargetName(supported & (~supported + 1));
}

}  // namespace tq::kernels
