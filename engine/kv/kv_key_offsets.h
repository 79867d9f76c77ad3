// Per-page key offsets: how SequenceKv takes the RoPE-rotated common part out of a head's keys before coding them.
//
// Keys of one head share a large common vector before RoPE (their pre-RoPE mean). After RoPE that vector turns
// with the position, so one fixed mean per head leaves most of it in the keys of later pages, where the codes
// spend their bits on it. A page's keys are therefore coded relative to the mean over the page's positions of the
// rotated pre-RoPE mean; the offset is computed, not stored (the head's pre-RoPE mean travels with its transform),
// and attention adds q . offset back to every score of the page (kernels/attention KvPageRef::score_bias).
#pragma once

#include <vector>

#include "engine/llm/arch.h"

namespace tq::engine {

// The RoPE geometry of one layer's keys. n_rot = 0: no rotation (the offsets are then the plain mean).
struct KeyRope {
  int n_rot = 0;
  RopeStyle style = RopeStyle::kAdjacent;
  float base = 10000.0f;
};

// Pre-RoPE mean of rows [n][head_dim] that sit at positions first_pos + t, over rows [from, n): [head_dim].
std::vector<float> PreRopeMean(const KeyRope& rope, const float* rows, int n, int from, int first_pos, int head_dim);

// out[head_dim] = the mean over positions [first_pos, first_pos + count) of RoPE(pre, position).
void RotatedMean(const KeyRope& rope, const std::vector<float>& pre, int first_pos, int count, int head_dim,
                 float* out);

}  // namespace tq::engine
