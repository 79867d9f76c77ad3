// Matrix products of GGUF weight matrices with f32 activations: the forward pass's hot loop.
//
// W is [rows, cols] in a weight type (rows contiguous, each row `row_bytes` bytes = WeightBytes(type, cols));
// X is [batch, cols] f32, row-major; Y is [batch, y_stride] f32 and receives Y[b][r] for r in [row_begin, row_end).
//
// A product runs in two phases so that several threads can share the first:
//   1. PrepareActivations converts X once per product. Block-quantized weights (Q8_0, Q4_0, Q4_1, Q4_K, Q5_K,
//      Q6_K) multiply 8-bit activations: each block of 32 values of X becomes int8 codes and an f32 scale
//      (x ~ d * q, |q| <= 127), so the products are integer dot products per block, scaled once per block (the
//      K-quants too: a scale per 32 values, finer than llama.cpp's Q8_K, which shares one over 256).
//      Float weights (F32, F16, BF16) multiply X as it is and need no prepared activations (0 bytes).
//   2. MatMulRows computes a range of rows, kMatMulRowTile rows at a time against up to 4 activation rows held
//      in registers. Small batches (decode, <= 4 rows of X) of Q8_0 / Q4_0 / Q4_1 / Q5_0 (and Q4_K / Q6_K on
//      AVX-512) unpack the weights in registers, reading each row start to end so that a thread's rows are one
//      sequential stream with prefetches a few KiB ahead; otherwise the tile's rows are decoded once into a small
//      panel (per-thread scratch) that the whole batch reuses, in blocks of tokens whose activations stay in L2.
// x86 (AVX2, AVX-512, AVX-512 VNNI) has hand-written integer kernels; other targets run the same loops in
// scalar integer code (matmul_q8.cc). The float path is portable Highway code. The SIMD target is chosen once
// per call by Highway's dynamic dispatch (the call covers a whole block of rows).
// Accuracy against DotRowRef (kernels/weights/weight_ref.h): float weights, f32 rounding only; quantized weights,
// additionally the activation rounding, at most sum over activation blocks of 32 values of
// (amax(x block) / 254) * sum |w| in the block.
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

// Rows per decoded panel: a thread's row range is best a multiple of it (any range is correct).
inline constexpr int64_t kMatMulRowTile = 4;

// Bytes of the prepared activations of all `batch` rows (shared by the threads of one product); 0 for the
// float weight types.
int64_t MatMulActivationBytes(const MatMulArgs& args);

// Bytes of per-thread scratch MatMulRows needs (the decoded panel).
int64_t MatMulScratchBytes(const MatMulArgs& args);

// Prepares activation rows [b_begin, b_end) of X into `acts` (MatMulActivationBytes(args) bytes, any alignment).
// Rows are independent: threads may prepare disjoint ranges of the same buffer.
void PrepareActivations(const MatMulArgs& args, int64_t b_begin, int64_t b_end, uint8_t* acts);

// Computes rows [row_begin, row_end) of Y from activations prepared for all rows of X (`acts` is unused for
// the float types). `scratch` holds MatMulScratchBytes(args) bytes, owned by the caller (one per thread).
void MatMulRows(const MatMulArgs& args, const uint8_t* acts, int64_t row_begin, int64_t row_end, uint8_t* scratch);

// Decodes one row of `cols` elements to f32 (SIMD where the type has a decoder).
void DecodeRow(WeightType type, const uint8_t* row, int64_t cols, float* out);

// sum_i a[i] * b[i], f32 accumulation in vector lanes.
float DotF32(const float* a, const float* b, int64_t n);

// y[i] += alpha * x[i].
void AxpyF32(float alpha, const float* x, float* y, int64_t n);

}  // namespace tq::kernels
