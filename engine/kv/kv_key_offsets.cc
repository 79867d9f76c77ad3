#include "engine/kv/kv_key_offsets.h"

#include <cmath>

namespace tq::engine {
namespace {

// The channels (a, b) of rotation pair i and its angle per position.
struct Pair {
  int a, b;
  double theta;
};

Pair PairOf(const KeyRope& rope, int i) {
  const int half = rope.n_rot / 2;
  const bool adjacent = rope.style == RopeStyle::kAdjacent;
  return {adjacent ? 2 * i : i, adjacent ? 2 * i + 1 : i + half,
          std::pow(static_cast<double>(rope.base), -2.0 * i / rope.n_rot)};
}

// Both styles rotate channels [0, n_rot): adjacent pairs (2i, 2i + 1) or halves (i, i + n_rot / 2).
bool Rotated(const KeyRope& rope, int c) { return c < rope.n_rot; }

}  // namespace

std::vector<float> PreRopeMean(const KeyRope& rope, const float* rows, int n, int from, int first_pos, int head_dim) {
  std::vector<double> sum(head_dim, 0.0);
  for (int t = from; t < n; ++t) {
    const float* x = rows + static_cast<size_t>(t) * head_dim;
    for (int c = 0; c < head_dim; ++c) {
      if (!Rotated(rope, c)) sum[c] += x[c];
    }
    for (int i = 0; i < rope.n_rot / 2; ++i) {
      const Pair p = PairOf(rope, i);
      const double ang = -p.theta * (first_pos + t);  // undo the rotation of this position
      const double c = std::cos(ang), s = std::sin(ang);
      sum[p.a] += x[p.a] * c - x[p.b] * s;
      sum[p.b] += x[p.a] * s + x[p.b] * c;
    }
  }
  std::vector<float> mean(head_dim, 0.0f);
  if (n > from) {
    for (int c = 0; c < head_dim; ++c) mean[c] = static_cast<float>(sum[c] / (n - from));
  }
  return mean;
}

void RotatedMean(const KeyRope& rope, const std::vector<float>& pre, int first_pos, int count, int head_dim,
                 float* out) {
  for (int c = 0; c < head_dim; ++c) {
    if (!Rotated(rope, c)) out[c] = pre[c];
  }
  for (int i = 0; i < rope.n_rot / 2; ++i) {
    const Pair p = PairOf(rope, i);
    // (1/N) sum_{t<N} e^{i theta (first + t)} = e^{i theta (first + (N-1)/2)} sin(N theta/2) / (N sin(theta/2));
    // theta is in (0, 1], so sin(theta / 2) > 0.
    const double gain = std::sin(count * p.theta / 2) / (count * std::sin(p.theta / 2));
    const double ang = p.theta * (first_pos + (count - 1) / 2.0);
    const double c = gain * std::cos(ang), s = gain * std::sin(ang);
    out[p.a] = static_cast<float>(pre[p.a] * c - pre[p.b] * s);
    out[p.b] = static_cast<float>(pre[p.a] * s + pre[p.b] * c);
  }
}

}  // namespace tq::engine
