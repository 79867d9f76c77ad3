// Matrix products of GGUF weight matrices with f32 activations: the forward pass's hot loop.
//
// W is [rows, cols] in a weight type (rows contiguous, each row `row_bytes` bytes = WeightBytes(type, cols));
// X is [batch, cols] f32, row-major; Y is [batch, y_stride] f32 and receives Y[b][r] for r in [row_begin, row_end).
// The SIMD target is chosen once per call by Highway's dynamic dispatch (the call covers a whole block of rows).
// Types with a SIMD row decoder: F32, F16, Q8_0, Q4_0, Q4_1; the others go through the scalar reference decoder
// (kernels/weights/weight_ref.h) and the same SIMD dot products.
#pragma once

#include <cstdint>

#include "kernels/weights/weight_types.h"

namespace tq::kernels {

struct MatMulArgs {
  WeightType type = WeightType::kF32;
  const uint8_t* w = nullptr;  // row 0 of W
  int64_t row_bytes = 0;
  int64_t cols = 0;            // multiple of the type's block size
  const float* x = nullptr;    // [batch, cols]
  int64_t batch = 1;
  float* y = nullptr;          // [batch, y_stride]
  int64_t y_stride = 0;
};

// Computes rows [row_begin, row_end) of Y. `scratch` holds `cols` floats (one decoded row), owned by the caller
// (one per thread).
void MatMulRows(const MatMulArgs& args, int64_t row_begin, int64_t row_end, float* scratch);

// Decodes one row of `cols` elements to f32 (SIMD where the type has a decoder).
void DecodeRow(WeightType type, const uint8_t* row, int64_t cols, float* out);

// sum_i a[i] * b[i], f32 accumulation in vector lanes.
float DotF32(const float* a, const float* b, int64_t n);

// y[i] += alpha * x[i].
void AxpyF32(float alpha, const float* x, float* y, int64_t n);

}  // namespace tq::kernels
