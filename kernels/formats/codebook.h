// Lloyd-Max scalar quantizers for one coordinate of a uniform random unit vector in `dim` dimensions.
//
// The coordinate t has density proportional to (1 - t^2)^((dim - 3) / 2) on [-1, 1] (it tends to N(0, 1/dim)).
// The optimal `bits`-bit quantizer for that law is computed once per (dim, bits) by Lloyd's iterations on a fine
// numerical integral of the exact density, and cached for the life of the process.
#pragma once

#include <array>
#include <vector>

namespace tq::kernels {

struct Codebook {
  int dim = 0;
  int bits = 0;
  std::vector<float> centroids;   // [2^bits], ascending, symmetric around 0; bfloat16 values where bits == 4
  std::vector<float> boundaries;  // [2^bits - 1], midpoints between neighbouring centroids
  // Expected normalized MSE E||u - c(u)||^2 for a uniform unit vector u in `dim` dimensions: dim * E(t - c(t))^2.
  double expected_mse = 0.0;

  // Index of the centroid nearest to t.
  int Quantize(float t) const;
};

// Scale search, for codes of at most kScaleSearchMaxBits bits. The stored norm is corrected to ||y|| / ||c||
// (c the chosen centroids), so only the direction of c matters: the encoder codes u = s * y / ||y|| for each
// scale s below and keeps the codes whose centroids point closest to y (largest sum(c * u1) / ||c||, u1 = y /
// ||y||, in fp32; the first scale wins ties). Nearest centroids (s = 1) are not the closest direction for
// about half the vectors: at head_dim 64 this cuts the normalized error by ~9% at 3 bits and ~19% at 4 bits
// (docs/formats.md). The encoders (reference, SIMD, CUDA) do exactly these fp32 operations in one order, so
// their bytes agree.
inline constexpr std::array<float, 6> kCodeScales = {1.0f, 0.8f, 0.9f, 1.1f, 1.2f, 1.3f};
inline constexpr int kScaleSearchMaxBits = 4;

// The cached codebook for (dim, bits). Thread-safe; the reference stays valid for the life of the process.
// Preconditions: 3 <= dim <= 65536, 1 <= bits <= 8.
const Codebook& LloydMaxCodebook(int dim, int bits);

}  // namespace tq::kernels
