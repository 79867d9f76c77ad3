// Internal to tq_matmul: weight prefetching, and the int8 path for block-quantized weights (matmul_q8.cc).
//
// Prepared activations, one record per row of X, `Q8ActivationStride(cols)` bytes apart (nb = cols / 32):
//   int8  q[cols]     codes, |q| <= 127, x[i] ~ d[i / 32] * q[i]
//   f32   d[nb]       block scales (amax / 127; 0 for an all-zero block)
//   f32   s[2 * nb]   s[2i + h] = d[i] * sum of q over the half-block [32i + 16h, 32i + 16h + 16)
//   f32   sb[nb]      sb[i] = s[2i] + s[2i + 1], the block's sum
// Every weight type, the K-quants too, reads the same record: one scale per 32 values. (A scale shared by a
// K-quant super-block of 256, as llama.cpp's Q8_K, saved a multiply per 64 codes but let one outlier coarsen 255
// other values: Gemma 3 270M's KV KLD at 5x rose from 0.0077 to 0.0123 and its perplexity from 23.94 to 24.14.)
// A weight row is decoded to a panel row of the same shape: u8 (or int8 for Q8_0) codes c[cols], a scale per
// half-block sc[2 * nb] and a min per half-block mn[2 * nb], with w[i] = sc[i / 16] * c[i] + mn[i / 16].
// Then  sum_i w[i] x[i] = sum_blocks d * (sum_halves sc * (c . q)) + sum_halves mn * s.
#pragma once

#include <hwy/cache_control.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/matmul.h"

namespace tq::kernels {

// Weight rows are read once per product, in order. The hardware prefetcher alone leaves decode (batch 1) at
// about 2/3 of the memory bandwidth; asking for the bytes kPrefetchBytes past the current tile closes the gap.
inline constexpr int64_t kPrefetchBytes = 4096;

// Tokens per block of a large batch: the activation rows of one block (`token_bytes` each) take about 512 KiB,
// so they stay in L2 while every row tile of a thread's range passes over them. A multiple of 8 tokens.
inline int64_t TokenBlock(int64_t token_bytes) {
  return std::max<int64_t>(8, (int64_t{512} << 10) / token_bytes / 8 * 8);
}

// Prefetches [tile + kPrefetchBytes, tile + kPrefetchBytes + tile_bytes), clipped to `end`.
inline void PrefetchAhead(const uint8_t* tile, int64_t tile_bytes, const uint8_t* end) {
  const uint8_t* p = tile + kPrefetchBytes;
  const uint8_t* stop = std::min(p + tile_bytes, end);
  for (; p < stop; p += 64) hwy::Prefetch(p);
}

// Whether `type` goes through the int8 path.
bool IsQ8PathType(WeightType type);

int64_t Q8ActivationStride(int64_t cols);
int64_t Q8ScratchBytes(int64_t cols);

// Quantizes rows [b_begin, b_end) of x ([*, cols]) into `acts`.
void QuantizeActivationsQ8(const float* x, int64_t cols, int64_t b_begin, int64_t b_end, uint8_t* acts);

void MatMulRowsQ8(const MatMulArgs& args, const uint8_t* acts, int64_t row_begin, int64_t row_end,
                  uint8_t* scratch);

}  // namespace tq::kernels
