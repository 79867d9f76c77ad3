// Online adaptation of precision classes: heads move between ACTIVE and SPARSE as their attention changes.
//
// Signal (free: the attention kernels count it anyway): for each (layer, KV head), the share of (query, token)
// pairs whose weight fell below the kernels' skip threshold (1e-6 of the running maximum): a concentrated head
// skips most tokens, a diffuse one few. Per engine step the counts are summed over the batch; a head's score is
// skipped / scored over a sliding window of the last `window` steps in which it attended.
//
// Decision, every `every` steps once the window is full: heads not fixed HOT are ranked by score; the top
// `n_active` (the ACTIVE count the preset gave) should be ACTIVE. Hysteresis: a SPARSE head is promoted only if
// it ranks inside the ACTIVE band by more than `margin` heads, and an ACTIVE head demoted only if it ranks outside
// by more than `margin`; a move must be wanted at two consecutive decisions; moves come in pairs (one up, one
// down) so the shares stay the preset's; at most `max_moves` pairs per decision. HOT heads never move.
//
// Threading: Add from any thread (atomics); the rest on the engine thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "engine/kv/precision.h"
#include "engine/options.h"

namespace tq::engine {

class HeadActivity {
 public:
  HeadActivity(int n_layers, int n_kv_heads);
  void Add(int layer, int kv_head, int64_t scored, int64_t skipped);
  // Moves the counts since the last call into the vectors ([n_layers * n_kv_heads] each) and zeroes them.
  void Take(std::vector<int64_t>* scored, std::vector<int64_t>* skipped);

 private:
  size_t n_;
  int n_kv_heads_;
  std::unique_ptr<std::atomic<int64_t>[]> scored_, skipped_;
};

struct ClassChange {
  int layer = 0;
  int kv_head = 0;
  PrecisionClass from = PrecisionClass::kActive;
  PrecisionClass to = PrecisionClass::kSparse;
};

class OnlineAdapter {
 public:
  // classes: the starting class of each (layer, KV head), [n_layers * n_kv_heads].
  OnlineAdapter(int n_layers, int n_kv_heads, std::vector<PrecisionClass> classes, AdaptationOptions options);

  // After every engine step, with that step's counts.
  void EndStep(const std::vector<int64_t>& scored, const std::vector<int64_t>& skipped);
  // The moves to make now (empty most steps); the adapter's classes already reflect them.
  std::vector<ClassChange> Decide();

  const std::vector<PrecisionClass>& classes() const { return classes_; }
  // Score of each head over the window (skipped share, 0 to 1); -1 for a head that did not attend.
  std::vector<double> Scores() const;
  uint64_t moves() const { return moves_; }

 private:
  int n_kv_heads_;
  std::vector<PrecisionClass> classes_;
  AdaptationOptions options_;
  std::deque<std::vector<int64_t>> scored_window_, skipped_window_;  // newest last, at most window_ steps
  std::vector<int64_t> scored_sum_, skipped_sum_;
  int steps_since_decision_ = 0;
  std::vector<int> wanted_;  // per head: +1 wanted up / -1 wanted down at the last decision, 0 neither
  uint64_t moves_ = 0;
};

}  // namespace tq::engine
