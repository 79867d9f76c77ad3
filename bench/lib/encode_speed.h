// Encode cost per KV format, scalar reference against the SIMD encoder, as `tqserve bench encode` prints it.
#pragma once

#include "common/status.h"
#include "kernels/formats/format.h"

namespace tq::kernels {

struct EncodeSpeed {
  KvFormat format = KvFormat::kF16;
  int head_dim = 0;
  double reference_ns_per_vector = 0.0;  // KvCodec::EncodePageReference, per vector of a full page
  double simd_ns_per_vector = 0.0;       // KvCodec::EncodePage (the best SIMD target of this CPU)
};

// Times both encoders on full pages of Gaussian vectors, one thread, in thread CPU time, alternating in
// `rounds` rounds of about min_seconds / rounds each per encoder; each figure is the best round (the least
// disturbed by other load). InvalidArgument for an unsupported (format, head_dim).
StatusOr<EncodeSpeed> MeasureEncodeSpeed(KvFormat format, int head_dim, double min_seconds, int rounds = 5);

}  // namespace tq::kernels
