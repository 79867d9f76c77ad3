// KvCodec: encodes and decodes whole pages of one format, with the state that format needs (rotation seed,
// codebooks, outlier channel set, QJL projection). Shaped like faiss's Quantizer: Train, Encode, Decode.
//
// EncodePage runs the SIMD encoder (kernels/formats/encode_simd.cc, best target chosen once per page);
// EncodePageReference and DecodePage are the scalar reference, never deleted, and the SIMD encoder writes the same
// bytes. The attention kernels read the same pages through layout(), SegmentTable() and the domain transforms below.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "kernels/formats/encode_simd.h"
#include "kernels/formats/format.h"
#include "kernels/formats/page.h"
#include "kernels/formats/rotation.h"

namespace tq::kernels {

inline constexpr uint64_t kDefaultSeed = 0x7475726271756174ull;

class KvCodec {
 public:
  // InvalidArgument for an unsupported (format, head_dim). Outlier formats start with the first
  // OutlierChannels() channels as outliers until Train() calibrates them.
  static StatusOr<std::unique_ptr<KvCodec>> Create(KvFormat format, int head_dim, uint64_t seed = kDefaultSeed);
  // The codec that reads pages with this (validated) header: built once per (format, head_dim, seed, outlier set)
  // and cached for the life of the process; thread-safe.
  static StatusOr<const KvCodec*> ForHeader(const PageHeader& header);

  // x: [n][head_dim]. Outlier formats pick the OutlierChannels() channels with the largest mean square; other
  // formats have nothing to learn.
  Status Train(const float* x, int n);
  // Encodes x: [n][head_dim], 1 <= n <= kPageTokens, into `page` (PageBytes() bytes), header included.
  // SIMD; the bytes are those of EncodePageReference. `rule`: what a TurboQuant code's norm keeps exact (NormRule;
  // other formats ignore it).
  Status EncodePage(const float* x, int n, std::span<uint8_t> page, NormRule rule = NormRule::kLength) const;
  // The scalar reference encoder: same contract and output as EncodePage.
  Status EncodePageReference(const float* x, int n, std::span<uint8_t> page,
                             NormRule rule = NormRule::kLength) const;
  // Decodes the page's num_tokens vectors into x: [num_tokens][head_dim]. Validates the header and that it
  // matches this codec.
  Status DecodePage(std::span<const uint8_t> page, float* x) const;

  // int8 only: clamp to median +- 3 * 1.4826 * MAD of the page's values before taking the scale.
  void set_robust_clamp(bool on) { robust_clamp_ = on; }
  // TurboQuant codes: scale search (codebook.h, kCodeScales), on by default. Off gives the paper's quantizer
  // (nearest centroid per coordinate), for comparing with its figures.
  void set_scale_search(bool on) { scale_search_ = on; }
  bool scale_search() const { return scale_search_; }

  KvFormat format() const { return layout_.format; }
  int head_dim() const { return layout_.head_dim; }
  uint64_t seed() const { return seed_; }
  const OutlierMask& outlier_mask() const { return outlier_mask_; }
  const CodeLayout& layout() const { return layout_; }
  // Value of each code of segment s: [2^bits] floats (centroids; +-sqrt(pi/2)/head_dim for QJL signs, code 1
  // positive); empty for f16 and int8 segments.
  const std::vector<float>& SegmentTable(int s) const { return tables_[s]; }

  // The encoder's view of segment s (boundaries, centroids, rotation parameters), for kernels that encode their
  // own way (the SIMD and CUDA encoders).
  const encode_internal::SegmentTables& EncodeTables(int s) const { return encode_tables_[s]; }
  // Outlier formats: rotated coordinate i reads channel channel_order()[i]; empty for other formats.
  const std::vector<int>& channel_order() const { return channel_order_; }
  // tq*p: the QJL projection S, [head_dim][head_dim] row-major; empty for other formats.
  const std::vector<float>& sketch() const { return sketch_; }

  // Domain transforms, all [head_dim] -> [head_dim]; in and out may alias except for the sketch ones.
  // Rotated = the coded domain of the tq formats (identity for f16 and int8).
  void ToRotated(const float* x, float* y) const;
  void FromRotated(const float* y, float* x) const;
  // z = S y (QJL projection of a rotated-domain vector; tq*p only).
  void ToSketch(const float* y, float* z) const;
  // y += S^T z (tq*p only).
  void AddFromSketch(const float* z, float* y) const;

 private:
  KvCodec(KvFormat format, int head_dim, uint64_t seed);
  void BuildTransforms();
  // Checks the arguments, zeroes the page and returns its header (not yet sealed).
  StatusOr<PageHeader> BeginEncode(int n, std::span<uint8_t> page) const;
  // int8: the clamp range of x [n][head_dim] (+-inf without the robust clamp); sets the header flag.
  void Int8ClampRange(const float* x, int n, PageHeader& header, float& lo, float& hi) const;
  // Compact formats write the token's norm to norms8[token] instead of the page (QuantizeNorms8 codes them).
  void EncodeTq(const float* x, int token, uint8_t* page, float* norms8, NormRule rule) const;
  Status EncodeInt8(const float* x, int n, uint8_t* page, PageHeader& header) const;

  CodeLayout layout_;
  uint64_t seed_;
  bool robust_clamp_ = false;
  bool scale_search_ = true;
  OutlierMask outlier_mask_ = {};
  std::vector<int> channel_order_;  // outlier formats: outlier channels then the rest, ascending in each
  std::vector<std::unique_ptr<Rotation>> rotations_;  // one per rotated segment
  std::vector<float> sketch_;       // tq*p: S, [head_dim][head_dim] row-major, i.i.d. N(0, 1)
  std::vector<std::vector<float>> tables_;
  std::vector<encode_internal::SegmentTables> encode_tables_;  // per segment, for the SIMD encoder
};

}  // namespace tq::kernels
