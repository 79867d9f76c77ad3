// Deterministic random numbers for rotations, projections and tests: the same seed gives the same bits on every
// platform and standard library (std::normal_distribution does not promise that).
#pragma once

#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace tq::kernels {

// SplitMix64 (Steele, Lea, Flood 2014).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n).
  uint64_t Below(uint64_t n) { return static_cast<uint64_t>(Uniform() * static_cast<double>(n)); }
  // Standard normal (Box-Muller; the second value is cached).
  double Gaussian() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u = 0.0;
    while (u <= 0.0) u = Uniform();
    const double v = Uniform();
    const double r = std::sqrt(-2.0 * std::log(u));
    spare_ = r * std::sin(2.0 * M_PI * v);
    has_spare_ = true;
    return r * std::cos(2.0 * M_PI * v);
  }
  // +1 or -1 with equal probability.
  float Sign() { return (Next() >> 63) ? 1.0f : -1.0f; }
  // A uniform random permutation of [0, n) (Fisher-Yates).
  std::vector<int> Permutation(int n) {
    std::vector<int> p(n);
    std::iota(p.begin(), p.end(), 0);
    for (int i = n - 1; i > 0; --i) std::swap(p[i], p[Below(static_cast<uint64_t>(i) + 1)]);
    return p;
  }

 private:
  uint64_t state_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

// Derives an independent seed for a named sub-stream (rotation of segment 1, QJL projection, ...).
inline uint64_t SubSeed(uint64_t seed, uint64_t stream) {
  Rng rng(seed ^ (0xd1b54a32d192ed03ull * (stream + 1)));
  return rng.Next();
}

}  // namespace tq::kernels
