// The small kernels of the GPU forward pass (engine/gpu/gpu_model.h), with the semantics of the CPU pass
// (engine/llm/model.cc). Activations are f32, row-major [rows][n]; weights are fp16 [rows][cols] (halfs as
// uint16_t bits here, so that host code needs no CUDA headers). Every launcher is asynchronous on `stream` and
// returns the launch error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"

namespace tq::gpu {

// out[r] = f32(table[tokens[r]]): table [vocab][cols] fp16, tokens device [rows], out [rows][cols].
Status EmbedRows(const uint16_t* table, int64_t cols, const int32_t* tokens, int rows, float* out,
                 cudaStream_t stream);

// out[r] = x[r] / rms(x[r]) * gain, rows of n (sum of squares in double, like the CPU). out may be x.
Status RmsNorm(const float* x, const float* gain, int rows, int n, float eps, float* out, cudaStream_t stream);

// y[b][r] (= or +=) sum_c w[r][c] * x[b][c] for b < batch, r < rows: w fp16 [rows][cols], x [batch][cols]
// (x_stride floats apart), y [batch][y_stride]. One warp per row, fp32 accumulation; the weights are read once
// per tile of up to 16 batch rows. accumulate: y += instead of y =.
Status MatMulF16(const uint16_t* w, int rows, int cols, const float* x, int64_t x_stride, int batch, float* y,
                 int64_t y_stride, bool accumulate, cudaStream_t stream);

// y[b][i] += bias[i] for b < batch, i < n; y rows y_stride floats apart.
Status AddBias(float* y, int64_t y_stride, const float* bias, int n, int batch, cudaStream_t stream);

// RoPE of the first n_rot dims of each head of x[b] ([n_heads][head_dim] at x + b * x_stride) by position pos[b]
// (device [batch]); angle i = pos * base^(-2i / n_rot) / divisors[i] in double (divisors: device [n_rot / 2], or
// null for none). neox: pairs (i, i + n_rot/2), else (2i, 2i+1).
Status Rope(float* x, int64_t x_stride, int batch, int n_heads, int head_dim, int n_rot, const int32_t* pos,
            float base, const float* divisors, bool neox, cudaStream_t stream);

// out[b][i] = silu(gu[b][i]) * gu[b][n + i]: gu [batch][2n] (gate then up), out [batch][n].
Status SwiGlu(const float* gu, int n, int batch, float* out, cudaStream_t stream);

// Copies the K and V rows of a batch into per-head tails: for row b and head h, k[b][h*d .. +d) (k row b at
// k + b * kv_stride, v likewise) goes to tail_k + h * head_stride + (first_slot + b) * d (tail_v likewise).
Status ScatterKv(const float* k, const float* v, int64_t kv_stride, int batch, int n_kv, int d, float* tail_k,
                 float* tail_v, int64_t head_stride, int first_slot, cudaStream_t stream);

// x[i] = scale * N(0, 1) for i < n, a counter-based function of (seed, i).
Status RandomNormal(float* x, int64_t n, uint64_t seed, float scale, cudaStream_t stream);

}  // namespace tq::gpu
