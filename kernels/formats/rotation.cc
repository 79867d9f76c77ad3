#include "kernels/formats/rotation.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <utility>

#include "kernels/formats/rng.h"

namespace tq::kernels {

void Fwht(float* x, int n) {
  for (int h = 1; h < n; h *= 2) {
    for (int i = 0; i < n; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        const float a = x[j];
        const float b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
}

namespace {

bool IsPowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

// Normalized block-diagonal Hadamard on x[dim]: blocks of the binary decomposition of dim, largest first.
// Symmetric and orthogonal, hence its own inverse.
void BlockHadamard(float* x, int dim) {
  int offset = 0;
  for (int bit = 30; bit >= 0; --bit) {
    const int block = 1 << bit;
    if ((dim & block) == 0) continue;
    Fwht(x + offset, block);
    const float norm = 1.0f / std::sqrt(static_cast<float>(block));
    for (int i = 0; i < block; ++i) x[offset + i] *= norm;
    offset += block;
  }
}

class HadamardRotation final : public Rotation {
 public:
  explicit HadamardRotation(HadamardParams params)
      : dim_(params.dim),
        rounds_(params.rounds),
        signs_{std::move(params.signs[0]), std::move(params.signs[1])},
        perms_{std::move(params.perms[0]), std::move(params.perms[1])} {}
  int dim() const override { return dim_; }

  void Forward(const float* x, float* y) const override {
    if (rounds_ == 1) {  // power of two: y = H (D x) / sqrt(dim), in place
      for (int i = 0; i < dim_; ++i) y[i] = x[i] * signs_[0][i];
      BlockHadamard(y, dim_);
      return;
    }
    std::vector<float> tmp(x, x + dim_);
    for (int r = 0; r < rounds_; ++r) {
      if (rounds_ > 1) {
        std::vector<float> in = tmp;
        for (int i = 0; i < dim_; ++i) tmp[i] = in[perms_[r][i]];
      }
      for (int i = 0; i < dim_; ++i) tmp[i] *= signs_[r][i];
      BlockHadamard(tmp.data(), dim_);
    }
    for (int i = 0; i < dim_; ++i) y[i] = tmp[i];
  }

  void Inverse(const float* y, float* x) const override {
    if (rounds_ == 1) {  // x = D H y / sqrt(dim), in place
      if (x != y) std::copy(y, y + dim_, x);
      BlockHadamard(x, dim_);
      for (int i = 0; i < dim_; ++i) x[i] *= signs_[0][i];
      return;
    }
    std::vector<float> tmp(y, y + dim_);
    for (int r = rounds_ - 1; r >= 0; --r) {
      BlockHadamard(tmp.data(), dim_);
      for (int i = 0; i < dim_; ++i) tmp[i] *= signs_[r][i];
      if (rounds_ > 1) {
        std::vector<float> in = tmp;
        for (int i = 0; i < dim_; ++i) tmp[perms_[r][i]] = in[i];
      }
    }
    for (int i = 0; i < dim_; ++i) x[i] = tmp[i];
  }

 private:
  int dim_;
  int rounds_;
  std::vector<float> signs_[2];
  std::vector<int> perms_[2];
};

class DenseRotation final : public Rotation {
 public:
  DenseRotation(int dim, uint64_t seed) : dim_(dim), q_(static_cast<size_t>(dim) * dim) {
    Rng rng(seed);
    std::vector<double> m(q_.size());
    for (double& v : m) v = rng.Gaussian();
    // Modified Gram-Schmidt on the rows, twice for accuracy.
    for (int pass = 0; pass < 2; ++pass) {
      for (int i = 0; i < dim; ++i) {
        double* row = &m[static_cast<size_t>(i) * dim];
        for (int j = 0; j < i; ++j) {
          const double* prev = &m[static_cast<size_t>(j) * dim];
          double dot = 0;
          for (int k = 0; k < dim; ++k) dot += row[k] * prev[k];
          for (int k = 0; k < dim; ++k) row[k] -= dot * prev[k];
        }
        double norm = 0;
        for (int k = 0; k < dim; ++k) norm += row[k] * row[k];
        norm = std::sqrt(norm);
        for (int k = 0; k < dim; ++k) row[k] /= norm;
      }
    }
    for (size_t i = 0; i < q_.size(); ++i) q_[i] = static_cast<float>(m[i]);
  }
  int dim() const override { return dim_; }

  void Forward(const float* x, float* y) const override {
    std::vector<float> out(dim_);
    for (int i = 0; i < dim_; ++i) {
      double acc = 0;
      for (int k = 0; k < dim_; ++k) acc += static_cast<double>(q_[static_cast<size_t>(i) * dim_ + k]) * x[k];
      out[i] = static_cast<float>(acc);
    }
    for (int i = 0; i < dim_; ++i) y[i] = out[i];
  }

  void Inverse(const float* y, float* x) const override {
    std::vector<double> out(dim_, 0.0);
    for (int i = 0; i < dim_; ++i) {
      for (int k = 0; k < dim_; ++k) out[k] += static_cast<double>(q_[static_cast<size_t>(i) * dim_ + k]) * y[i];
    }
    for (int k = 0; k < dim_; ++k) x[k] = static_cast<float>(out[k]);
  }

 private:
  int dim_;
  std::vector<float> q_;  // [dim][dim], row-major, orthonormal rows
};

}  // namespace

HadamardParams MakeHadamardParams(int dim, uint64_t seed) {
  assert(dim >= 1);
  HadamardParams params;
  params.dim = dim;
  params.rounds = IsPowerOfTwo(dim) ? 1 : 2;
  Rng rng(seed);
  for (int r = 0; r < params.rounds; ++r) {
    params.signs[r].resize(dim);
    for (float& s : params.signs[r]) s = rng.Sign();
    if (params.rounds > 1) params.perms[r] = rng.Permutation(dim);
  }
  return params;
}

std::unique_ptr<Rotation> MakeHadamardRotation(int dim, uint64_t seed) {
  assert(dim >= 1);
  return std::make_unique<HadamardRotation>(MakeHadamardParams(dim, seed));
}

std::unique_ptr<Rotation> MakeDenseRotation(int dim, uint64_t seed) {
  assert(dim >= 1);
  return std::make_unique<DenseRotation>(dim, seed);
}

}  // namespace tq::kernels
