#include "kernels/cpu/activation.h"

#include <cmath>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/activation.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tq::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

// The scalar forms: the tails of the SIMD loops, and the formulas the SIMD ones follow.
inline float Silu(float g) { return g / (1.0f + std::exp(-g)); }
inline float GeluTanh(float g) { return 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * (g + kGeluCubic * g * g * g))); }

void SwiGlu(float* gate, const float* up, int64_t n) {
  // exp in double, rounded once to float: the float exp glibc computes (it evaluates in double too), so the result
  // equals the scalar form's in all but rare ties. A float Exp of 1-2 ulps moved SmolLM2's greedy golden
  // continuation off llama.cpp's at one step (the int8 activation codes amplify any change near a rounding edge).
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(dd));
  const auto one = hn::Set(df, 1.0f);
  // Exp is valid up to 700 in double; -g past it gives silu(g) = g / huge, 0 in float either way.
  const auto max_exponent = hn::Set(dd, 700.0);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto g = hn::LoadU(df, gate + i);
    const auto e = hn::DemoteTo(df, hn::Exp(dd, hn::Min(hn::PromoteTo(dd, hn::Neg(g)), max_exponent)));
    hn::StoreU(hn::Mul(hn::Div(g, hn::Add(one, e)), hn::LoadU(df, up + i)), df, gate + i);
  }
  for (; i < n; ++i) gate[i] = Silu(gate[i]) * up[i];
}

void GeGluTanh(float* gate, const float* up, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto half = hn::Set(d, 0.5f), one = hn::Set(d, 1.0f);
  const auto k = hn::Set(d, kSqrt2OverPi), c = hn::Set(d, kGeluCubic);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto g = hn::LoadU(d, gate + i);
    const auto inner = hn::Mul(k, hn::MulAdd(hn::Mul(c, g), hn::Mul(g, g), g));  // k (g + c g^3)
    const auto gelu = hn::Mul(hn::Mul(half, g), hn::Add(one, hn::Tanh(d, inner)));
    hn::StoreU(hn::Mul(gelu, hn::LoadU(d, up + i)), d, gate + i);
  }
  for (; i < n; ++i) gate[i] = GeluTanh(gate[i]) * up[i];
}

}  // namespace HWY_NAMESPACE
}  // namespace tq::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tq::kernels {

HWY_EXPORT(SwiGlu);
HWY_EXPORT(GeGluTanh);

void SwiGluF32(float* gate, const float* up, int64_t n) { HWY_DYNAMIC_DISPATCH(SwiGlu)(gate, up, n); }
void GeGluTanhF32(float* gate, const float* up, int64_t n) { HWY_DYNAMIC_DISPATCH(GeGluTanh)(gate, up, n); }

}  // namespace tq::kernels
#endif  // HWY_ONCE
