// Orthogonal rotations applied to head vectors before TurboQuant coding.
//
// HadamardRotation, for dim a power of two: R = H D / sqrt(dim), H the Walsh-Hadamard matrix (fast transform,
// O(dim log dim)), D a diagonal of seeded random signs.
// For other dims (48, 80, 96, ...) it is two rounds of R_k = B D_k P_k (k = 1, 2): P_k a seeded random permutation,
// D_k seeded random signs, B block-diagonal normalized Hadamard with blocks of the binary decomposition of dim,
// largest first (96 = 64 + 32). The second round's permutation mixes coordinates across the first round's blocks.
// DenseRotation: a seeded random orthogonal matrix (Gram-Schmidt on a Gaussian matrix), O(dim^2); kept for tests.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace tq::kernels {

class Rotation {
 public:
  virtual ~Rotation() = default;
  virtual int dim() const = 0;
  // y = R x. x and y: [dim]; they may be the same buffer.
  virtual void Forward(const float* x, float* y) const = 0;
  // x = R^T y. x and y: [dim]; they may be the same buffer.
  virtual void Inverse(const float* y, float* x) const = 0;
};

// The seeded parameters of the randomized Hadamard rotation of `dim` coordinates, for kernels that apply it their
// own way (the SIMD encoder). Round r: x <- x[perm[r][i]] (rounds == 2 only), x <- x * signs[r], then the normalized
// block Hadamard (blocks of the binary decomposition of dim, largest first; each block: unnormalized fast
// Walsh-Hadamard transform, stages h = 1, 2, 4, ..., then a multiply by the float 1 / sqrt(block)).
struct HadamardParams {
  int dim = 0;
  int rounds = 1;                // 1 for a power-of-two dim, else 2
  std::vector<float> signs[2];   // [dim] of +-1 per round
  std::vector<int> perms[2];     // [dim] per round, empty when rounds == 1
};

// Precondition: dim >= 1.
HadamardParams MakeHadamardParams(int dim, uint64_t seed);
// Precondition: dim >= 1. Applies MakeHadamardParams(dim, seed).
std::unique_ptr<Rotation> MakeHadamardRotation(int dim, uint64_t seed);
std::unique_ptr<Rotation> MakeDenseRotation(int dim, uint64_t seed);

// In-place unnormalized fast Walsh-Hadamard transform of x[n], n a power of two.
void Fwht(float* x, int n);

}  // namespace tq::kernels
