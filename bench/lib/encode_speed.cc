#include "bench/lib/encode_speed.h"

#include <algorithm>
#include <ctime>
#include <limits>
#include <memory>
#include <vector>

#include "kernels/formats/codec.h"
#include "kernels/formats/rng.h"

namespace tq::kernels {

namespace {

constexpr int kPages = 4;  // distinct input pages cycled through (inputs stay in cache: this is compute)

// CPU time of the calling thread: time slices lost to other processes on a shared machine do not count.
double ThreadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

StatusOr<EncodeSpeed> MeasureEncodeSpeed(KvFormat format, int head_dim, double min_seconds, int rounds) {
  TQ_ASSIGN_OR_RETURN(std::unique_ptr<KvCodec> codec, KvCodec::Create(format, head_dim));
  Rng rng(31);
  std::vector<float> x(static_cast<size_t>(kPages) * kPageTokens * head_dim);
  for (float& v : x) v = static_cast<float>(rng.Gaussian());
  std::vector<uint8_t> page(codec->layout().page_bytes);
  const double round_seconds = std::max(min_seconds, 1e-3) / std::max(rounds, 1);
  // ns per vector of one timed round: whole passes over the pages until round_seconds have passed.
  auto time_round = [&](bool simd) -> StatusOr<double> {
    int64_t vectors = 0;
    const double start = ThreadSeconds();
    double elapsed = 0.0;
    do {
      for (int p = 0; p < kPages; ++p) {
        const float* in = x.data() + static_cast<size_t>(p) * kPageTokens * head_dim;
        TQ_RETURN_IF_ERROR(simd ? codec->EncodePage(in, kPageTokens, page)
                                : codec->EncodePageReference(in, kPageTokens, page));
      }
      vectors += static_cast<int64_t>(kPages) * kPageTokens;
      elapsed = ThreadSeconds() - start;
    } while (elapsed < round_seconds);
    return elapsed * 1e9 / static_cast<double>(vectors);
  };
  EncodeSpeed speed;
  speed.format = format;
  speed.head_dim = head_dim;
  speed.reference_ns_per_vector = speed.simd_ns_per_vector = std::numeric_limits<double>::infinity();
  for (int r = 0; r < std::max(rounds, 1); ++r) {
    TQ_ASSIGN_OR_RETURN(double ref, time_round(false));
    TQ_ASSIGN_OR_RETURN(double simd, time_round(true));
    speed.reference_ns_per_vector = std::min(speed.reference_ns_per_vector, ref);
    speed.simd_ns_per_vector = std::min(speed.simd_ns_per_vector, simd);
  }
  return speed;
}

}  // namespace tq::kernels
