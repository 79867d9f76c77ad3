// The SIMD gated activations against the libm formulas, on every SIMD target this CPU supports.
#include "kernels/cpu/activation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "tests/unit/simd_targets.h"

namespace tq::kernels {
namespace {

class ActivationTest : public tq::testing::SimdTargetTest {};

// Gates over what FFNs produce (|g| up to 30, a dense middle) plus the tails where exp over- or underflows; an odd
// count so that every target's scalar tail runs too.
std::vector<float> Gates() {
  std::vector<float> g;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int i = 0; i < 4001; ++i) g.push_back(normal(rng));
  for (float x : {-200.0f, -88.5f, -87.0f, -30.0f, -10.0f, -1e-6f, 0.0f, 1e-6f, 10.0f, 30.0f, 88.5f, 200.0f}) {
    g.push_back(x);
  }
  return g;
}

// The up rows: 0.5 to 2, so that the product scales the gate's error.
std::vector<float> Ups(size_t n) {
  std::vector<float> up(n);
  for (size_t i = 0; i < n; ++i) up[i] = 0.5f + static_cast<float>(i % 7) * 0.25f;
  return up;
}

// Against the double-precision formula: 4e-6 relative, plus 2e-7 |g up| absolute: where 1 + tanh (or 1 + exp)
// cancels, float keeps an absolute error of an ulp of 1 times g up / 2, in the scalar form as in SIMD.
void ExpectClose(const std::vector<float>& gate, const std::vector<float>& up, const std::vector<float>& got,
                 const std::vector<double>& want) {
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << i;
    EXPECT_NEAR(got[i], want[i], 4e-6 * std::abs(want[i]) + 2e-7 * std::abs(gate[i] * up[i]) + 1e-30)
        << "gate " << gate[i];
  }
}

TEST_P(ActivationTest, SwiGluMatchesFormula) {
  const std::vector<float> g = Gates();
  const std::vector<float> up = Ups(g.size());
  std::vector<float> out = g;
  SwiGluF32(out.data(), up.data(), static_cast<int64_t>(out.size()));
  std::vector<double> want(g.size());
  for (size_t i = 0; i < g.size(); ++i) want[i] = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * up[i];
  ExpectClose(g, up, out, want);
}

TEST_P(ActivationTest, GeGluTanhMatchesFormula) {
  const std::vector<float> g = Gates();
  const std::vector<float> up = Ups(g.size());
  std::vector<float> out = g;
  GeGluTanhF32(out.data(), up.data(), static_cast<int64_t>(out.size()));
  std::vector<double> want(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const double x = g[i];
    want[i] = 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))) * up[i];
  }
  ExpectClose(g, up, out, want);
}

INSTANTIATE_TEST_SUITE_P(AllTargets, ActivationTest, ::testing::ValuesIn(tq::testing::SupportedSimdTargets()),
                         tq::testing::SimdTargetName);

}  // namespace
}  // namespace tq::kernels
