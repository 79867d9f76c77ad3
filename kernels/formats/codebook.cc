#include "kernels/formats/codebook.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

namespace tq::kernels {

int Codebook::Quantize(float t) const {
  return static_cast<int>(std::upper_bound(boundaries.begin(), boundaries.end(), t) - boundaries.begin());
}

namespace {

// x rounded to the nearest value with 8 significant bits (the top 16 bits of its fp32 pattern; ties to even).
float RoundToBfloat16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000u;
  std::memcpy(&x, &bits, sizeof bits);
  return x;
}

// Cumulative integrals of the (unnormalized) density f and of t*f on a uniform grid over [-limit, limit], where
// the mass beyond `limit` (14 standard deviations, or 1) is negligible. Linear interpolation between grid points.
class CoordinateLaw {
 public:
  explicit CoordinateLaw(int dim) {
    limit_ = std::min(1.0, 14.0 / std::sqrt(static_cast<double>(dim)));
    step_ = 2.0 * limit_ / kIntervals;
    mass_.assign(kIntervals + 1, 0.0);
    moment_.assign(kIntervals + 1, 0.0);
    const double exponent = (dim - 3) / 2.0;
    auto density = [&](double t) {
      const double one_minus = 1.0 - t * t;
      return one_minus <= 0.0 ? 0.0 : std::exp(exponent * std::log(one_minus));
    };
    double prev_f = density(-limit_);
    for (int i = 1; i <= kIntervals; ++i) {
      const double t0 = -limit_ + (i - 1) * step_;
      const double t1 = t0 + step_;
      const double tm = 0.5 * (t0 + t1);
      const double f0 = prev_f, fm = density(tm), f1 = density(t1);
      // Simpson's rule on each interval.
      mass_[i] = mass_[i - 1] + step_ / 6.0 * (f0 + 4.0 * fm + f1);
      moment_[i] = moment_[i - 1] + step_ / 6.0 * (t0 * f0 + 4.0 * tm * fm + t1 * f1);
      prev_f = f1;
    }
    total_ = mass_[kIntervals];
  }

  double Mass(double t) const { return Interp(mass_, t) / total_; }
  double Moment(double t) const { return Interp(moment_, t) / total_; }
  double limit() const { return limit_; }

  // The t with Mass(t) == p, by bisection.
  double Quantile(double p) const {
    double lo = -limit_, hi = limit_;
    for (int i = 0; i < 200; ++i) {
      const double mid = 0.5 * (lo + hi);
      (Mass(mid) < p ? lo : hi) = mid;
    }
    return 0.5 * (lo + hi);
  }

 private:
  static constexpr int kIntervals = 1 << 16;

  double Interp(const std::vector<double>& table, double t) const {
    if (t <= -limit_) return table.front();
    if (t >= limit_) return table.back();
    const double pos = (t + limit_) / step_;
    const int i = std::min(static_cast<int>(pos), kIntervals - 1);
    const double frac = pos - i;
    return table[i] + frac * (table[i + 1] - table[i]);
  }

  double limit_ = 1.0;
  double step_ = 0.0;
  double total_ = 1.0;
  std::vector<double> mass_;
  std::vector<double> moment_;
};

Codebook ComputeCodebook(int dim, int bits) {
  const CoordinateLaw law(dim);
  const int levels = 1 << bits;
  std::vector<double> c(levels), b(levels + 1);
  for (int i = 0; i < levels; ++i) c[i] = law.Quantile((i + 0.5) / levels);
  b.front() = -law.limit();
  b.back() = law.limit();
  const double sigma = 1.0 / std::sqrt(static_cast<double>(dim));
  for (int iter = 0; iter < 20000; ++iter) {
    for (int i = 1; i < levels; ++i) b[i] = 0.5 * (c[i - 1] + c[i]);
    double change = 0.0;
    for (int i = 0; i < levels; ++i) {
      const double mass = law.Mass(b[i + 1]) - law.Mass(b[i]);
      if (mass <= 0.0) continue;
      const double next = (law.Moment(b[i + 1]) - law.Moment(b[i])) / mass;
      change = std::max(change, std::abs(next - c[i]));
      c[i] = next;
    }
    if (change < 1e-9 * sigma) break;
  }
  // Symmetrize (the law is symmetric; this removes rounding asymmetry).
  for (int i = 0; i < levels / 2; ++i) {
    const double v = 0.5 * (c[levels - 1 - i] - c[i]);
    c[i] = -v;
    c[levels - 1 - i] = v;
  }
  // 4-bit tables are rounded to 8 significant bits (bfloat16 values, relative change <= 2^-9), which at these
  // magnitudes are binary16 values too: the AVX2 kernel then looks 32 codes up at once with two byte shuffles
  // (the table's bytes 2 and 3 as fp32), where 32-bit entries take two permutes and a blend per 8 codes. The
  // MSE this adds is ~1e-6 of the vector's energy.
  if (bits == 4) {
    for (double& v : c) v = RoundToBfloat16(static_cast<float>(v));
  }
  Codebook book;
  book.dim = dim;
  book.bits = bits;
  // E(t - c(t))^2 = E t^2 - sum_i (2 c_i M_i - c_i^2 P_i) over the cells (M_i the first moment, P_i the mass),
  // E t^2 = 1 / dim; exact also for centroids moved off the cells' means by the rounding.
  double gain = 0.0;
  for (int i = 0; i < levels; ++i) {
    const double lo = i == 0 ? -law.limit() : 0.5 * (c[i - 1] + c[i]);
    const double hi = i == levels - 1 ? law.limit() : 0.5 * (c[i] + c[i + 1]);
    gain += 2.0 * c[i] * (law.Moment(hi) - law.Moment(lo)) - c[i] * c[i] * (law.Mass(hi) - law.Mass(lo));
    book.centroids.push_back(static_cast<float>(c[i]));
    if (i > 0) book.boundaries.push_back(static_cast<float>(0.5 * (c[i - 1] + c[i])));
  }
  book.expected_mse = dim * (1.0 / dim - gain);
  return book;
}

}  // namespace

const Codebook& LloydMaxCodebook(int dim, int bits) {
  assert(dim >= 3 && dim <= 65536 && bits >= 1 && bits <= 8);
  static std::mutex mutex;
  static std::map<std::pair<int, int>, std::unique_ptr<Codebook>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<Codebook>& slot = cache[{dim, bits}];
  if (!slot) slot = std::make_unique<Codebook>(ComputeCodebook(dim, bits));
  return *slot;
}

}  // namespace tq::kernels
