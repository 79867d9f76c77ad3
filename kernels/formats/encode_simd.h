// The SIMD page encoder behind KvCodec::EncodePage (Highway, compiled for every target in HWY_TARGETS, the
// best one chosen once per page by HWY_DYNAMIC_DISPATCH). Internal to kernels/formats: KvCodec fills an
// EncodeJob from its state and calls EncodePageSimd; KvCodec::EncodePageReference is the scalar reference it
// is tested against.
//
// It works on one 16-token code group at a time with the tokens in SIMD lanes (the page layout's own order:
// byte t of a 16-byte row belongs to token t), so the rotation, the centroid search and the packing are all
// lane-wise, with no shuffles. Every arithmetic step is the reference's, in the same order and precision
// (fp32 rotation and division, fp64 sums of squares and QJL dot products), so the page bytes are identical to
// the reference's on every target, ties at centroid boundaries included.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/formats/page.h"
#include "kernels/formats/rotation.h"

namespace tq::kernels {

// What a TurboQuant code's stored norm makes exact (y the rotated vector, c its chosen centroids, decoded = norm c):
// - kLength: norm = ||y|| / ||c||, the decoded vector has y's length. Its component along y falls short by the
//   cosine of the angle between c and y (about sqrt(1 - MSE): 0.94 at 2 bits), the same shortfall for every vector.
// - kInnerProduct: norm = ||y||^2 / <c, y>, so <decoded, y> = ||y||^2 and decoded = y + an error orthogonal to y
//   (a larger error, 1/cos^2 - 1 against 2 (1 - cos) of the squared length). Attention outputs are weighted sums of
//   many values: their independent errors average out, a common shortfall does not, so values use this
//   (engine/kv/kv_cache.cc). Falls back to kLength where <c, y> <= 0.
// The decoder is the same for both (norm x centroids): a page does not record which rule wrote it.
enum class NormRule : uint8_t { kLength, kInnerProduct };

}  // namespace tq::kernels

namespace tq::kernels::encode_internal {

// What the encoder needs to know about one segment of CodeLayout::segments.
struct SegmentTables {
  std::vector<float> boundaries;  // kRotated: [2^bits - 1] ascending Lloyd-Max boundaries; code = #{b <= t}
  std::vector<float> centroids;   // kRotated: [2^bits]
  HadamardParams rotation;        // kRotated: the segment's rotation (dim = seg.dims)
};

struct EncodeJob {
  const CodeLayout* layout = nullptr;
  const SegmentTables* segments = nullptr;  // [layout->segments.size()]
  const int* channel_order = nullptr;       // [head_dim], outlier formats: rotated coordinate i reads channel
                                            // channel_order[i]; null: identity
  const float* sketch = nullptr;            // tq*p: S, [head_dim][head_dim] row-major; else null
  const float* x = nullptr;                 // [n][head_dim]
  int n = 0;                                // tokens, 1..kPageTokens
  uint8_t* page = nullptr;                  // layout->page_bytes, zeroed; the header is not written
  bool scale_search = true;                 // TurboQuant codes of <= 4 bits: scale search (codebook.h)
  NormRule norm_rule = NormRule::kLength;   // TurboQuant codes: what the stored norm makes exact
  // int8 only: clamp range applied before the scale is taken (+-inf without the robust clamp).
  float int8_lo = 0.0f;
  float int8_hi = 0.0f;
};

struct EncodeResult {
  bool finite = true;  // int8: false if x holds a non-finite value (nothing useful was written)
  float scale = 0.0f;  // int8: the page scale (value = code * scale); compact formats: norm = code * scale
};

// Writes the norms and codes of job.n tokens. Dispatches once to the best SIMD target.
EncodeResult EncodePageSimd(const EncodeJob& job);

}  // namespace tq::kernels::encode_internal
