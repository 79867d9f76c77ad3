// The gated FFN activations of the forward pass, SIMD (Highway, dynamic dispatch), in place on the gate rows:
//   SwiGluF32:   gate[i] = silu(gate[i]) * up[i],          silu(g) = g / (1 + exp(-g))
//   GeGluTanhF32: gate[i] = gelu_tanh(gate[i]) * up[i],   gelu_tanh(g) = g/2 (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))
// gate and up hold n floats each. Accuracy: SwiGLU takes exp in double and rounds once (as glibc's expf does), so
// it matches the scalar formula to the last ulp almost everywhere; GeGLU uses Highway's float Tanh (a few ulps).
// activation_test checks both against the double formulas over the range a model produces.
#pragma once

#include <cstdint>

namespace tq::kernels {

void SwiGluF32(float* gate, const float* up, int64_t n);
void GeGluTanhF32(float* gate, const float* up, int64_t n);

}  // namespace tq::kernels
