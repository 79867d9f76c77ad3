#include "kernels/cpu/simd.h"

#include <hwy/highway.h>
#include <hwy/targets.h>
#include <strings.h>

namespace tq::kernels {

namespace {

// The bits of HWY_TARGETS, best first (a bit set; lower bits are better targets on x86).
std::vector<int64_t> CompiledTargetBits() {
  std::vector<int64_t> bits;
  for (int64_t targets = HWY_TARGETS; targets != 0; targets &= targets - 1)
    bits.push_back(targets & (~targets + 1));
  return bits;
}

}  // namespace

std::vector<std::string> CompiledSimdTargets() {
  std::vector<std::string> names;
  for (const int64_t bit : CompiledTargetBits()) names.emplace_back(hwy::TargetName(bit));
  return names;
}

std::string ActiveSimdTarget() {
  const int64_t supported = hwy::SupportedTargets() & HWY_TARGETS;
  if (supported == 0) return hwy::TargetName(HWY_STATIC_TARGET);
  return hwy::TargetName(supported & (~supported + 1));
}

Status LimitSimdTarget(std::string_view name) {
  const std::string wanted(name);
  if (strcasecmp(wanted.c_str(), "auto") == 0) {
    hwy::DisableTargets(0);  // dispatch on every target the CPU supports again
    return Status::Ok();
  }
  std::string known;
  for (const int64_t bit : CompiledTargetBits()) {
    if (strcasecmp(wanted.c_str(), hwy::TargetName(bit)) != 0) {
      known += std::string(known.empty() ? "" : ", ") + hwy::TargetName(bit);
      continue;
    }
    hwy::DisableTargets(0);
    if ((hwy::SupportedTargets() & bit) == 0) {
      return FailedPreconditionError("this CPU does not support the SIMD target " + wanted +
                                     " (best here: " + ActiveSimdTarget() + ")");
    }
    // On x86 a lower bit is a better target: switch off every bit below this one.
    hwy::DisableTargets(bit - 1);
    return Status::Ok();
  }
  return InvalidArgumentError("unknown SIMD target '" + wanted + "'; this binary has auto, " + known);
}

}  // namespace tq::kernels
