// Precision classes per (layer, KV head): HOT heads keep f16, ACTIVE heads 8 bits, SPARSE heads 4 bits or fewer.
// Which heads are which comes from a profile of head importance (`tqserve calibrate`) and a preset that says what
// share of heads each class gets.
//
// Importance of a head: how concentrated its attention is. For a query attending to n >= 16 positions with
// weights p, concentration = 1 - H(p) / log(n) (0 = uniform, 1 = all weight on one position), averaged over the
// queries of the calibration text and over the query heads that share the KV head. A concentrated head relies on
// a few exact keys (a rounding error moves its argmax); a diffuse head averages many values and forgives noise.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tq::engine {

enum class PrecisionClass { kHot, kActive, kSparse };
std::string_view PrecisionClassName(PrecisionClass c);  // "hot", "active", "sparse"

struct HeadProfile {
  std::string model;        // the model's name when calibrated
  int n_layers = 0;
  int n_kv_heads = 0;
  std::vector<double> score;  // [n_layers * n_kv_heads], layer-major: importance, higher = keep more precision
  int64_t queries = 0;        // queries the scores were averaged over
};

StatusOr<HeadProfile> LoadHeadProfile(const std::string& path);
Status SaveHeadProfile(const HeadProfile& profile, const std::string& path);

// A preset: the share of heads in HOT and ACTIVE (the rest SPARSE). Names: code (15:70:15), longdoc
// (10:60:30), chat (20:65:15), auto (the seed's percentile rule: above P90 HOT, P40 to P90 ACTIVE, below P40
// SPARSE).
struct Preset {
  std::string_view name;
  double hot;     // share of heads, [0, 1]
  double active;
};
StatusOr<Preset> FindPreset(std::string_view name);

// Accumulates attention concentration per (layer, KV head) from many threads (calibration).
class ConcentrationStats {
 public:
  ConcentrationStats(int n_layers, int n_kv_heads);
  // One query's weights over n positions (normalized, n >= 16 to count).
  void Add(int layer, int kv_head, const float* weights, int n);
  HeadProfile ToProfile(std::string model) const;

 private:
  int n_layers_, n_kv_heads_;
  std::unique_ptr<std::atomic<double>[]> sum_;
  std::unique_ptr<std::atomic<int64_t>[]> count_;
};

// Ranks heads by score (ties by position) and assigns classes by the preset's shares:
// the top round(hot * n) heads HOT, the next round(active * n) ACTIVE, the rest SPARSE.
std::vector<PrecisionClass> AssignClasses(const HeadProfile& profile, const Preset& preset);

}  // namespace tq::engine
