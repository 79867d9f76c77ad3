#include "kernels/formats/codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <string>
#include <tuple>

#include "kernels/formats/codebook.h"
#include "kernels/formats/fp16.h"
#include "kernels/formats/rng.h"

namespace tq::kernels {

namespace {

uint16_t* NormSlot(uint8_t* page, const CodeLayout& layout, int slot) {
  return reinterpret_cast<uint16_t*>(page + layout.norms_offset) + static_cast<size_t>(slot) * kPageTokens;
}
uint8_t* Group(uint8_t* page, const CodeLayout& layout, int token) {
  return page + layout.codes_offset + layout.group_bytes * (token / kGroupTokens);
}
const uint8_t* Group(const uint8_t* page, const CodeLayout& layout, int token) {
  return page + layout.codes_offset + layout.group_bytes * (token / kGroupTokens);
}
// f16 segment: row i of a group is 16 halfs, token t at position t.
uint16_t* HalfAt(uint8_t* group, int i, int t) {
  return reinterpret_cast<uint16_t*>(group) + static_cast<size_t>(i) * kGroupTokens + t;
}

}  // namespace

KvCodec::KvCodec(KvFormat format, int head_dim, uint64_t seed)
    : layout_(MakeCodeLayout(format, head_dim)), seed_(seed) {
  for (int c = 0; c < OutlierChannels(format, head_dim); ++c) MaskSet(outlier_mask_, c);
  BuildTransforms();
}

StatusOr<std::unique_ptr<KvCodec>> KvCodec::Create(KvFormat format, int head_dim, uint64_t seed) {
  TQ_RETURN_IF_ERROR(CheckSupported(format, head_dim));
  return std::unique_ptr<KvCodec>(new KvCodec(format, head_dim, seed));
}

StatusOr<const KvCodec*> KvCodec::ForHeader(const PageHeader& header) {
  TQ_ASSIGN_OR_RETURN(KvFormat format, FormatFromId(header.format));
  TQ_RETURN_IF_ERROR(CheckSupported(format, header.head_dim));
  using Key = std::tuple<uint8_t, uint16_t, uint64_t, OutlierMask>;
  static std::mutex mutex;
  static std::map<Key, std::unique_ptr<KvCodec>> cache;
  const uint64_t seed = IsRotated(format) ? header.seed : 0;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<KvCodec>& slot = cache[Key{header.format, header.head_dim, seed, header.outlier_mask}];
  if (!slot) {
    slot.reset(new KvCodec(format, header.head_dim, seed));
    slot->outlier_mask_ = header.outlier_mask;
    slot->BuildTransforms();
  }
  return slot.get();
}

void KvCodec::BuildTransforms() {
  const int d = layout_.head_dim;
  rotations_.clear();
  tables_.assign(layout_.segments.size(), {});
  encode_tables_.assign(layout_.segments.size(), {});
  channel_order_.clear();
  sketch_.clear();
  const FormatKind kind = GetFormatInfo(layout_.format).kind;
  if (kind == FormatKind::kTqOutlier) {
    for (int c = 0; c < d; ++c) if (MaskHas(outlier_mask_, c)) channel_order_.push_back(c);
    for (int c = 0; c < d; ++c) if (!MaskHas(outlier_mask_, c)) channel_order_.push_back(c);
  }
  for (size_t s = 0; s < layout_.segments.size(); ++s) {
    const CodeSegment& seg = layout_.segments[s];
    if (seg.domain == CodeDomain::kRotated) {
      rotations_.push_back(MakeHadamardRotation(seg.dims, SubSeed(seed_, s)));
      const Codebook& book = LloydMaxCodebook(seg.dims, seg.bits);
      tables_[s] = book.centroids;
      encode_tables_[s] = {book.boundaries, book.centroids, MakeHadamardParams(seg.dims, SubSeed(seed_, s))};
    } else if (seg.domain == CodeDomain::kSketch) {
      const float a = static_cast<float>(std::sqrt(M_PI / 2.0) / d);
      tables_[s] = {-a, a};
      Rng rng(SubSeed(seed_, 100));
      sketch_.resize(static_cast<size_t>(d) * d);
      for (float& v : sketch_) v = static_cast<float>(rng.Gaussian());
    }
  }
}

void KvCodec::ToRotated(const float* x, float* y) const {
  const int d = layout_.head_dim;
  if (!IsRotated(layout_.format)) {
    std::memmove(y, x, sizeof(float) * d);
    return;
  }
  std::vector<float> tmp(x, x + d);
  if (!channel_order_.empty()) {
    for (int i = 0; i < d; ++i) tmp[i] = x[channel_order_[i]];
  }
  size_t r = 0;
  for (const CodeSegment& seg : layout_.segments) {
    if (seg.domain != CodeDomain::kRotated) continue;
    rotations_[r++]->Forward(tmp.data() + seg.first, tmp.data() + seg.first);
  }
  std::memcpy(y, tmp.data(), sizeof(float) * d);
}

void KvCodec::FromRotated(const float* y, float* x) const {
  const int d = layout_.head_dim;
  if (!IsRotated(layout_.format)) {
    std::memmove(x, y, sizeof(float) * d);
    return;
  }
  std::vector<float> tmp(y, y + d);
  size_t r = 0;
  for (const CodeSegment& seg : layout_.segments) {
    if (seg.domain != CodeDomain::kRotated) continue;
    rotations_[r++]->Inverse(tmp.data() + seg.first, tmp.data() + seg.first);
  }
  if (channel_order_.empty()) {
    std::memcpy(x, tmp.data(), sizeof(float) * d);
  } else {
    for (int i = 0; i < d; ++i) x[channel_order_[i]] = tmp[i];
  }
}

void KvCodec::ToSketch(const float* y, float* z) const {
  const int d = layout_.head_dim;
  for (int j = 0; j < d; ++j) {
    const float* row = &sketch_[static_cast<size_t>(j) * d];
    double acc = 0.0;
    for (int i = 0; i < d; ++i) acc += static_cast<double>(row[i]) * y[i];
    z[j] = static_cast<float>(acc);
  }
}

void KvCodec::AddFromSketch(const float* z, float* y) const {
  const int d = layout_.head_dim;
  for (int j = 0; j < d; ++j) {
    const float* row = &sketch_[static_cast<size_t>(j) * d];
    for (int i = 0; i < d; ++i) y[i] += row[i] * z[j];
  }
}

Status KvCodec::Train(const float* x, int n) {
  if (GetFormatInfo(layout_.format).kind != FormatKind::kTqOutlier) return Status::Ok();
  if (n <= 0) return InvalidArgumentError("Train needs at least one vector");
  const int d = layout_.head_dim;
  std::vector<double> power(d, 0.0);
  for (int v = 0; v < n; ++v) {
    for (int c = 0; c < d; ++c) power[c] += static_cast<double>(x[static_cast<size_t>(v) * d + c]) *
                                            x[static_cast<size_t>(v) * d + c];
  }
  std::vector<int> order(d);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return power[a] > power[b]; });
  outlier_mask_ = {};
  for (int i = 0; i < OutlierChannels(layout_.format, d); ++i) MaskSet(outlier_mask_, order[i]);
  BuildTransforms();
  return Status::Ok();
}

namespace {

// The scale of kCodeScales whose codes point closest to y (see there). y: [dims], norm = ||y|| > 0.
float BestCodeScale(const Codebook& book, const float* y, int dims, float norm) {
  if (book.bits > kScaleSearchMaxBits) return 1.0f;
  float best_scale = 1.0f;
  float best = -INFINITY;
  for (const float s : kCodeScales) {
    float dot = 0.0f;  // fp32, multiply then add (this file is compiled without contraction): the SIMD order
    float c2 = 0.0f;
    for (int i = 0; i < dims; ++i) {
      const float t = y[i] / norm;
      const float c = book.centroids[book.Quantize(t * s)];
      dot += c * t;
      c2 += c * c;
    }
    const float score = dot / std::sqrt(c2);
    if (score > best) {
      best = score;
      best_scale = s;
    }
  }
  return best_scale;
}

}  // namespace

void KvCodec::EncodeTq(const float* x, int token, uint8_t* page, float* norms8, NormRule rule) const {
  const int d = layout_.head_dim;
  const int t = token % kGroupTokens;
  uint8_t* group = Group(page, layout_, token);
  std::vector<float> y(d), residual;
  ToRotated(x, y.data());
  for (size_t s = 0; s < layout_.segments.size(); ++s) {
    const CodeSegment& seg = layout_.segments[s];
    if (seg.domain == CodeDomain::kRotated) {
      double sum = 0.0;
      for (int i = 0; i < seg.dims; ++i) sum += static_cast<double>(y[seg.first + i]) * y[seg.first + i];
      const float norm = static_cast<float>(std::sqrt(sum));
      const Codebook& book = LloydMaxCodebook(seg.dims, seg.bits);
      const float scale =
          scale_search_ && norm > 0.0f ? BestCodeScale(book, y.data() + seg.first, seg.dims, norm) : 1.0f;
      // Norm correction (NormRule): kLength stores ||y|| / ||c||, c the vector of chosen centroids, so the decoded
      // vector has exactly the input's length (the centroids alone fall short of unit length by the MSE);
      // kInnerProduct stores ||y||^2 / <c, y>. fp64 sums of exact fp32 products, in order (the SIMD encoder's).
      double c2 = 0.0, cy = 0.0;
      for (int i = 0; i < seg.dims; ++i) {
        const float u = y[seg.first + i] / norm * scale;
        const uint32_t code = norm > 0.0f ? static_cast<uint32_t>(book.Quantize(u)) : 0u;
        SetCode(group, seg, i, t, code);
        c2 += static_cast<double>(book.centroids[code]) * book.centroids[code];
        cy += static_cast<double>(book.centroids[code]) * y[seg.first + i];
      }
      const float corrected = rule == NormRule::kInnerProduct && cy > 0.0 ? static_cast<float>(sum / cy)
                              : c2 > 0.0                                  ? static_cast<float>(norm / std::sqrt(c2))
                                                                          : norm;
      if (layout_.norm_bytes == 1) {  // compact: coded once the page's norms are all known (QuantizeNorms8)
        norms8[static_cast<size_t>(seg.norm_slot) * kPageTokens + token] = corrected;
        continue;  // no sketch in a compact format: the residual is not needed
      }
      const uint16_t norm_half = FloatToHalf(corrected);
      NormSlot(page, layout_, seg.norm_slot)[token] = norm_half;
      const float stored = HalfToFloat(norm_half);
      for (int i = 0; i < seg.dims; ++i) {
        y[seg.first + i] -= stored * book.centroids[GetCode(group, seg, i, t)];  // the residual, for QJL
      }
    } else {  // kSketch: signs of S r and ||r||, r the rotated-domain residual of the MSE code
      double sum = 0.0;
      for (int i = 0; i < d; ++i) sum += static_cast<double>(y[i]) * y[i];
      NormSlot(page, layout_, seg.norm_slot)[token] = FloatToHalf(static_cast<float>(std::sqrt(sum)));
      std::vector<float> z(d);
      ToSketch(y.data(), z.data());
      for (int j = 0; j < d; ++j) SetCode(group, seg, j, t, z[j] >= 0.0f ? 1u : 0u);
    }
  }
}

void KvCodec::Int8ClampRange(const float* x, int n, PageHeader& header, float& lo, float& hi) const {
  lo = -INFINITY;
  hi = INFINITY;
  if (!robust_clamp_) return;
  const size_t count = static_cast<size_t>(n) * layout_.head_dim;
  std::vector<float> v(x, x + count);
  std::nth_element(v.begin(), v.begin() + count / 2, v.end());
  const float median = v[count / 2];
  for (float& e : v) e = std::abs(e - median);
  std::nth_element(v.begin(), v.begin() + count / 2, v.end());
  const float spread = 3.0f * 1.4826f * v[count / 2];
  lo = median - spread;
  hi = median + spread;
  header.flags |= kPageFlagRobustClamp;
}

Status KvCodec::EncodeInt8(const float* x, int n, uint8_t* page, PageHeader& header) const {
  const int d = layout_.head_dim;
  const size_t count = static_cast<size_t>(n) * d;
  float lo = 0.0f, hi = 0.0f;
  Int8ClampRange(x, n, header, lo, hi);
  float max_abs = 0.0f;
  for (size_t i = 0; i < count; ++i) {
    if (!std::isfinite(x[i])) return InvalidArgumentError("int8 encode: non-finite value");
    max_abs = std::max(max_abs, std::abs(std::clamp(x[i], lo, hi)));
  }
  const float scale = max_abs / 127.0f;
  header.scale = scale;
  const CodeSegment& seg = layout_.segments[0];
  for (int token = 0; token < n; ++token) {
    uint8_t* group = Group(page, layout_, token);
    for (int i = 0; i < d; ++i) {
      const float v = std::clamp(x[static_cast<size_t>(token) * d + i], lo, hi);
      const long q = scale > 0.0f ? std::lround(v / scale) : 0;
      const int8_t code = static_cast<int8_t>(std::clamp(q, -127L, 127L));
      SetCode(group, seg, i, token % kGroupTokens, static_cast<uint8_t>(code));
    }
  }
  return Status::Ok();
}

StatusOr<PageHeader> KvCodec::BeginEncode(int n, std::span<uint8_t> page) const {
  if (n < 1 || n > kPageTokens) {
    return InvalidArgumentError("EncodePage: " + std::to_string(n) + " tokens, need 1.." +
                                std::to_string(kPageTokens));
  }
  if (page.size() < layout_.page_bytes) {
    return InvalidArgumentError("EncodePage: buffer of " + std::to_string(page.size()) + " bytes, need " +
                                std::to_string(layout_.page_bytes));
  }
  PageHeader header;
  header.format = static_cast<uint8_t>(layout_.format);
  header.head_dim = static_cast<uint16_t>(layout_.head_dim);
  header.num_tokens = static_cast<uint16_t>(n);
  header.seed = IsRotated(layout_.format) ? seed_ : 0;
  header.outlier_mask = outlier_mask_;
  std::memset(page.data(), 0, layout_.page_bytes);
  return header;
}

Status KvCodec::EncodePage(const float* x, int n, std::span<uint8_t> page, NormRule rule) const {
  TQ_ASSIGN_OR_RETURN(PageHeader header, BeginEncode(n, page));
  encode_internal::EncodeJob job;
  job.layout = &layout_;
  job.segments = encode_tables_.data();
  job.channel_order = channel_order_.empty() ? nullptr : channel_order_.data();
  job.sketch = sketch_.empty() ? nullptr : sketch_.data();
  job.x = x;
  job.n = n;
  job.page = page.data();
  job.scale_search = scale_search_;
  job.norm_rule = rule;
  if (GetFormatInfo(layout_.format).kind == FormatKind::kInt8) {
    Int8ClampRange(x, n, header, job.int8_lo, job.int8_hi);
  }
  const encode_internal::EncodeResult result = encode_internal::EncodePageSimd(job);
  if (!result.finite) return InvalidArgumentError("int8 encode: non-finite value");
  header.scale = result.scale;
  SealHeader(header);
  std::memcpy(page.data(), &header, sizeof(header));
  return Status::Ok();
}

Status KvCodec::EncodePageReference(const float* x, int n, std::span<uint8_t> page, NormRule rule) const {
  TQ_ASSIGN_OR_RETURN(PageHeader header, BeginEncode(n, page));
  const int d = layout_.head_dim;
  switch (GetFormatInfo(layout_.format).kind) {
    case FormatKind::kFloat16:
      for (int token = 0; token < n; ++token) {
        uint8_t* group = Group(page.data(), layout_, token);
        for (int i = 0; i < d; ++i) {
          *HalfAt(group, i, token % kGroupTokens) = FloatToHalf(x[static_cast<size_t>(token) * d + i]);
        }
      }
      break;
    case FormatKind::kInt8:
      TQ_RETURN_IF_ERROR(EncodeInt8(x, n, page.data(), header));
      break;
    case FormatKind::kPlainF32:  // never paged: KvCodec::Create refuses it (CheckSupported)
      return InternalError("format f32 has no pages");
    case FormatKind::kTqMse:
    case FormatKind::kTqOutlier:
    case FormatKind::kTqProd: {
      // Compact: [norms][kPageTokens], slot-major as on the page; tokens past n stay 0 (code 0).
      std::vector<float> norms8(layout_.norm_bytes == 1 ? static_cast<size_t>(layout_.norms) * kPageTokens : 0, 0.0f);
      for (int token = 0; token < n; ++token) {
        EncodeTq(x + static_cast<size_t>(token) * d, token, page.data(), norms8.data(), rule);
      }
      if (layout_.norm_bytes == 1) {
        header.scale = QuantizeNorms8(norms8.data(), CompactNormCount(layout_, n), page.data() + layout_.norms_offset);
      }
      break;
    }
  }
  SealHeader(header);
  std::memcpy(page.data(), &header, sizeof(header));
  return Status::Ok();
}

Status KvCodec::DecodePage(std::span<const uint8_t> page, float* x) const {
  TQ_ASSIGN_OR_RETURN(PageHeader header, ReadPageHeader(page));
  if (header.format != static_cast<uint8_t>(layout_.format) || header.head_dim != layout_.head_dim ||
      (IsRotated(layout_.format) && header.seed != seed_) || header.outlier_mask != outlier_mask_) {
    return InvalidArgumentError("DecodePage: page does not match this codec");
  }
  const int d = layout_.head_dim;
  std::vector<float> y(d), z(d);
  for (int token = 0; token < header.num_tokens; ++token) {
    const uint8_t* group = Group(page.data(), layout_, token);
    const int t = token % kGroupTokens;
    float* out = x + static_cast<size_t>(token) * d;
    std::fill(y.begin(), y.end(), 0.0f);
    bool has_sketch = false;
    for (size_t s = 0; s < layout_.segments.size(); ++s) {
      const CodeSegment& seg = layout_.segments[s];
      switch (seg.domain) {
        case CodeDomain::kPlain:
          for (int i = 0; i < d; ++i) {
            y[i] = seg.bits == 16 ? HalfToFloat(reinterpret_cast<const uint16_t*>(group)[i * kGroupTokens + t])
                                  : static_cast<int8_t>(GetCode(group, seg, i, t)) * header.scale;
          }
          break;
        case CodeDomain::kRotated: {
          const float norm = ReadNorm(page.data(), layout_, seg.norm_slot, token, header.scale);
          for (int i = 0; i < seg.dims; ++i) y[seg.first + i] = norm * tables_[s][GetCode(group, seg, i, t)];
          break;
        }
        case CodeDomain::kSketch: {
          const float norm = ReadNorm(page.data(), layout_, seg.norm_slot, token, header.scale);
          for (int j = 0; j < d; ++j) z[j] = norm * tables_[s][GetCode(group, seg, j, t)];
          has_sketch = true;
          break;
        }
      }
    }
    if (has_sketch) AddFromSketch(z.data(), y.data());
    FromRotated(y.data(), out);
  }
  return Status::Ok();
}

}  // namespace tq::kernels
