// Value-parameterized tests that run once per SIMD target this CPU supports (Highway), for the kernels that are
// checked against their scalar reference on every target:
//
//   class MySimd : public tq::testing::SimdTargetTest {};
//   TEST_P(MySimd, MatchesReference) { ... }
//   INSTANTIATE_TEST_SUITE_P(Targets, MySimd, ::testing::ValuesIn(tq::testing::SupportedSimdTargets()),
//                            tq::testing::SimdTargetName);
#pragma once

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tq::testing {

// The targets compiled in that this CPU supports, one target bit each.
inline std::vector<int64_t> SupportedSimdTargets() { return hwy::SupportedAndGeneratedTargets(); }

// Runs each test with dynamic dispatch limited to the target GetParam().
class SimdTargetTest : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override { hwy::SetSupportedTargetsForTest(GetParam()); }
  void TearDown() override { hwy::SetSupportedTargetsForTest(0); }
};

inline std::string SimdTargetName(const ::testing::TestParamInfo<int64_t>& info) {
  return hwy::TargetName(info.param);
}

}  // namespace tq::testing
