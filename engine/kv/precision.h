// Precision classes per (layer, KV head): HOT heads keep f16, ACTIVE heads 8 bits, SPARSE heads 4 bits or
// fewer. Which heads are which comes from a profile of head importance (`tqserve calibrate`) and a preset
// that says what share of heads each class gets.
//
// Importance of a head, by the profile's method:
// - "sensitivity" (engine/eval/calibrate.h): the measured damage of storing that head alone in the SPARSE
// format
//   (tq4 by default) with every other head f16, less the damage of storing it alone in the ACTIVE format
//   (int8): mean KL divergence (nats per scored token) of the next-token distribution against all-f16 KV on
//   calibration chunks. Subtracting the ACTIVE run removes a floor that any perturbation of a head's KV costs
//   on a quantized model (larger for early layers) and leaves what the head loses going from ACTIVE to
//   SPARSE.
// - "concentration": how concentrated its attention is. For a query attending to n >= 16 positions with
//   weights p, concentration = 1 - H(p) / log(n) (0 = uniform, 1 = all weight on one position), averaged over
//   the queries of the calibration text and over the query heads that share the KV head. A weak predictor on
//   SmolLM2 (docs/kv.md); profiles without a "method" field are concentration profiles.
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
  std::string model;  // the model's name when calibrated
  int n_layers = 0;
  int n_kv_heads = 0;
  std::vector<double>
      score;            // [n_layers * n_kv_heads], layer-major: importance, higher = keep more precision
  int64_t queries = 0;  // queries (concentration) or scored tokens (sensitivity) the scores are averaged over
  std::string method = "concentration";  // "concentration" | "sensitivity" | "depth" (DepthProfile)
  std::string format;  // sensitivity: the format each head was measured in ("tq4", "int8/tq4"); else ""
  std::string baseline_format;  // sensitivity: the format whose damage was subtracted ("int8"); "" = none
  // Sensitivity: the two measurements, [n_layers * n_kv_heads] nats per token (score = kld - kld_baseline);
  // empty otherwise.
  std::vector<double> kld, kld_baseline;
};

StatusOr<HeadProfile> LoadHeadProfile(const std::string& path);
Status SaveHeadProfile(const HeadProfile& profile, const std::string& path);

// A preset: the share of heads in HOT and ACTIVE (the rest SPARSE). Names: code (15:70:15), longdoc
// (10:60:30), chat (20:65:15), auto (the seed's percentile rule: above P90 HOT, P40 to P90 ACTIVE, below P40
// SPARSE), or explicit shares "HOT:ACTIVE:SPARSE" (three non-negative numbers with a positive sum, taken as
// proportions: "10:50:40", "89:0:1"; name "shares").
// "5x" and "6x" (issue 38's low-bit rows; docs/kv.md) put every head ACTIVE (the warm tier) in one compact format
// within a budget of page bits per value (every byte of a page counted): 5x tq3.5c keys with tq3c values where
// that fits 3.2 bits (head_dim 256: 3.19), else tq3c (3.19 at head_dim 64); 6x tq3c keys with tq2.5c values where
// that fits 2.7 bits (head_dim 256: 2.69), else tq3c / tq2c (2.69 at head_dim 64). They need no profile.
// "default" (the server's default, docs/kv.md "The default") needs no profile: without one it ranks heads by
// DepthProfile, and it brings its own ACTIVE and SPARSE formats (used where kv.active_format / kv.sparse_format
// are "auto").
struct Preset {
  std::string_view name;
  double hot;  // share of heads, [0, 1]
  double active;
  std::string_view active_format = "int8";  // the formats "auto" means for this preset
  std::string_view sparse_format = "tq4";
  bool needs_profile = true;  // false: DepthProfile when no profile is given
  int boundary_layers = 0;    // the first and last N layers HOT f16 where kv.boundary_layers is -1 (at most L/2)
  // Where non-empty, the format "auto" means for ACTIVE and SPARSE at the model's head_dim if its page bits per
  // value (the mean of keys and values) are at most max_page_bits; active_format / sparse_format otherwise.
  std::string_view preferred_format = "";
  double max_page_bits = 0;
};
StatusOr<Preset> FindPreset(std::string_view name);

// The server's default KV configuration, chosen by the rule in docs/kv.md ("The default") and measured by
// bench/quality/default_rule.py: the first and last 2 layers HOT (f16, hot tier), the rest of the outer half of the
// layers ACTIVE (int8 keys, tq4 values, warm RAM), the inner half SPARSE (tq4, the cold tier); 6.50 bits per value on
// SmolLM2.
inline constexpr Preset kDefaultPreset{"default", 0.0, 0.5, "int8/tq4", "tq4", false, 2};

// A profile that needs no calibration: a head's score is its layer's distance from the middle layer, so the first
// and last layers (the most sensitive on the models measured, docs/kv.md) rank first; method "depth".
HeadProfile DepthProfile(int n_layers, int n_kv_heads);

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
