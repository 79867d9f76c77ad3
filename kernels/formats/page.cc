#include "kernels/formats/page.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>

#include "kernels/formats/fp16.h"

namespace tq::kernels {

namespace {

// Bytes of one segment inside a 16-token code group: 16 tokens x dims x bits / 8.
size_t SegmentGroupBytes(int dims, int bits) { return static_cast<size_t>(2) * dims * bits; }

void AddSegment(CodeLayout& layout, int first, int dims, int bits, int norm_slot, CodeDomain domain) {
  CodeSegment seg{first, dims, bits, norm_slot, domain, layout.group_bytes};
  layout.segments.push_back(seg);
  layout.group_bytes += SegmentGroupBytes(dims, bits);
}

// MakeCodeLayout(format, head_dim).page_bytes without building the layout (no allocation): every segment of a
// group holds 16 tokens x dims x bits / 8 bytes, and the segments' bits sum to CodeBitsPerVector.
size_t PageBytesOf(KvFormat format, int head_dim) {
  const size_t group_bytes = static_cast<size_t>(2) * CodeBitsPerVector(format, head_dim);
  const FormatInfo& info = GetFormatInfo(format);
  return kPageHeaderBytes + static_cast<size_t>(info.norm_bytes) * kPageTokens * info.norms +
         group_bytes * (kPageTokens / kGroupTokens);
}

}  // namespace

CodeLayout MakeCodeLayout(KvFormat format, int head_dim) {
  const FormatInfo& info = GetFormatInfo(format);
  CodeLayout layout;
  layout.format = format;
  layout.head_dim = head_dim;
  layout.norms = info.norms;
  layout.norm_bytes = info.norm_bytes;
  switch (info.kind) {
    case FormatKind::kFloat16:
      AddSegment(layout, 0, head_dim, 16, -1, CodeDomain::kPlain);
      break;
    case FormatKind::kInt8:
      AddSegment(layout, 0, head_dim, 8, -1, CodeDomain::kPlain);
      break;
    case FormatKind::kTqMse:
      AddSegment(layout, 0, head_dim, info.bits, 0, CodeDomain::kRotated);
      break;
    case FormatKind::kTqOutlier: {
      const int outliers = OutlierChannels(format, head_dim);
      AddSegment(layout, 0, outliers, info.bits + 1, 0, CodeDomain::kRotated);
      AddSegment(layout, outliers, head_dim - outliers, info.bits, 1, CodeDomain::kRotated);
      break;
    }
    case FormatKind::kTqProd:
      AddSegment(layout, 0, head_dim, info.bits - 1, 0, CodeDomain::kRotated);
      AddSegment(layout, 0, head_dim, 1, 1, CodeDomain::kSketch);
      break;
    case FormatKind::kPlainF32:  // not paged; the precondition (CheckSupported) excludes it
      assert(false && "f32 has no page layout");
      break;
  }
  layout.norms_offset = kPageHeaderBytes;
  layout.codes_offset = kPageHeaderBytes + static_cast<size_t>(layout.norm_bytes) * kPageTokens * layout.norms;
  layout.page_bytes = layout.codes_offset + layout.group_bytes * (kPageTokens / kGroupTokens);
  assert(layout.page_bytes == PageBytesOf(format, head_dim));
  return layout;
}

StatusOr<size_t> PageBytes(KvFormat format, int head_dim) {
  TQ_RETURN_IF_ERROR(CheckSupported(format, head_dim));
  return PageBytesOf(format, head_dim);
}

float QuantizeNorms8(const float* norms, int n, uint8_t* codes) {
  // Non-finite norms (from non-finite input) take no part in the scale and code as 255 (+inf) or 0 (NaN).
  float max_norm = 0.0f;
  for (int t = 0; t < n; ++t) {
    if (std::isfinite(norms[t])) max_norm = std::max(max_norm, norms[t]);
  }
  const float scale = max_norm / 255.0f;
  for (int t = 0; t < n; ++t) {
    const float r = scale > 0.0f ? norms[t] / scale : 0.0f;
    codes[t] = r >= 255.0f ? 255 : r > 0.0f ? static_cast<uint8_t>(std::lround(r)) : 0;
  }
  return scale;
}

float ReadNorm(const uint8_t* page, const CodeLayout& layout, int slot, int token, float scale) {
  const uint8_t* norms = page + layout.norms_offset + static_cast<size_t>(layout.norm_bytes) * slot * kPageTokens;
  if (layout.norm_bytes == 1) return norms[token] * scale;
  uint16_t half;
  std::memcpy(&half, norms + 2 * static_cast<size_t>(token), sizeof(half));
  return HalfToFloat(half);
}

uint32_t HeaderChecksum(const PageHeader& header) {
  uint64_t words[sizeof(PageHeader) / 8];
  std::memcpy(words, &header, sizeof(words));
  // The checksum field reads as zero (masked here rather than in a copy: a 4-byte store into a copy and 8-byte
  // loads over it stall store forwarding, once per page header read).
  static_assert(offsetof(PageHeader, checksum) == 24 && std::endian::native == std::endian::little);
  words[3] &= 0xffffffff00000000ull;
  // Each step is a bijection of the running hash and of the word, so any change to one word changes the 64-bit
  // hash; the 32-bit result is its fold.
  uint64_t hash = 0x6a09e667f3bcc908ull;
  for (uint64_t w : words) {
    hash = (hash ^ w) * 0x9e3779b97f4a7c15ull;
    hash ^= hash >> 29;
  }
  return static_cast<uint32_t>(hash ^ (hash >> 32));
}

void SealHeader(PageHeader& header) { header.checksum = HeaderChecksum(header); }

Status InitPage(const PageHeader& header, std::span<uint8_t> page) {
  TQ_ASSIGN_OR_RETURN(KvFormat format, FormatFromId(header.format));
  TQ_ASSIGN_OR_RETURN(size_t bytes, PageBytes(format, header.head_dim));
  if (page.size() < bytes) {
    return InvalidArgumentError("page buffer of " + std::to_string(page.size()) + " bytes, need " +
                                std::to_string(bytes));
  }
  std::memset(page.data(), 0, bytes);
  PageHeader sealed = header;
  SealHeader(sealed);
  std::memcpy(page.data(), &sealed, sizeof(sealed));
  return Status::Ok();
}

StatusOr<PageHeader> ReadPageHeader(std::span<const uint8_t> page) {
  if (page.size() < sizeof(PageHeader)) {
    return DataLossError("page of " + std::to_string(page.size()) + " bytes is shorter than its header");
  }
  PageHeader header;
  std::memcpy(&header, page.data(), sizeof(header));
  if (header.magic != kPageMagic) return DataLossError("page header: bad magic");
  if (header.checksum != HeaderChecksum(header)) return DataLossError("page header: checksum mismatch");
  if (header.version != kPageVersion) {
    return DataLossError("page header: unsupported version " + std::to_string(header.version));
  }
  StatusOr<KvFormat> format = FormatFromId(header.format);
  if (!format.ok()) return DataLossError("page header: " + format.status().message());
  TQ_RETURN_IF_ERROR(CheckSupported(*format, header.head_dim));
  if (header.num_tokens > kPageTokens) {
    return DataLossError("page header: " + std::to_string(header.num_tokens) + " tokens > " +
                         std::to_string(kPageTokens));
  }
  if (header.reserved != 0) return DataLossError("page header: reserved field is not zero");
  const FormatKind kind = GetFormatInfo(*format).kind;
  if ((header.flags & ~kPageFlagRobustClamp) != 0 || (header.flags != 0 && kind != FormatKind::kInt8)) {
    return DataLossError("page header: unknown flags");
  }
  if (kind == FormatKind::kInt8 || HasPageScale(*format)) {
    if (!std::isfinite(header.scale) || header.scale < 0.0f) return DataLossError("page header: bad page scale");
  } else if (header.scale != 0.0f) {
    return DataLossError("page header: scale set for a format without one");
  }
  int outliers = 0, stray = 0;  // mask bits below head_dim, and at or above it
  uint64_t words[kMaxHeadDim / 64];
  static_assert(sizeof(words) == sizeof(header.outlier_mask));
  std::memcpy(words, header.outlier_mask.data(), sizeof(words));
  for (int w = 0; w < kMaxHeadDim / 64; ++w) {
    if (words[w] == 0) continue;  // the common case (no outlier format); popcount is a library call on x86-64 v1
    const int below = std::clamp(header.head_dim - 64 * w, 0, 64);
    const uint64_t keep = below == 64 ? ~0ull : (1ull << below) - 1;
    outliers += std::popcount(words[w] & keep);
    stray += std::popcount(words[w] & ~keep);
  }
  if (stray != 0 || outliers != OutlierChannels(*format, header.head_dim)) {
    return DataLossError("page header: outlier channel set has " + std::to_string(outliers + stray) +
                         " channels, expected " + std::to_string(OutlierChannels(*format, header.head_dim)));
  }
  const size_t bytes = PageBytesOf(*format, header.head_dim);
  if (page.size() < bytes) {
    return DataLossError("page of " + std::to_string(page.size()) + " bytes, format needs " +
                         std::to_string(bytes));
  }
  return header;
}

uint32_t GetCode(const uint8_t* group, const CodeSegment& seg, int i, int t) {
  const uint8_t* base = group + seg.group_offset;
  switch (seg.bits) {
    case 1:
    case 2:
    case 4:
    case 8: {
      const int per_row = 8 / seg.bits;
      const uint8_t byte = base[(i / per_row) * kGroupTokens + t];
      return (byte >> ((i % per_row) * seg.bits)) & ((1u << seg.bits) - 1);
    }
    case 3: {
      const uint32_t lo = (base[(i / 4) * kGroupTokens + t] >> ((i % 4) * 2)) & 3u;
      const uint8_t* hi_plane = base + static_cast<size_t>(kGroupTokens) * (seg.dims / 4);
      const uint32_t hi = (hi_plane[(i / 8) * kGroupTokens + t] >> (i % 8)) & 1u;
      return lo | (hi << 2);
    }
    default:
      assert(false && "GetCode: unsupported width");
      return 0;
  }
}

void SetCode(uint8_t* group, const CodeSegment& seg, int i, int t, uint32_t code) {
  uint8_t* base = group + seg.group_offset;
  auto put = [](uint8_t& byte, int shift, uint32_t mask, uint32_t value) {
    byte = static_cast<uint8_t>((byte & ~(mask << shift)) | ((value & mask) << shift));
  };
  switch (seg.bits) {
    case 1:
    case 2:
    case 4:
    case 8: {
      const int per_row = 8 / seg.bits;
      put(base[(i / per_row) * kGroupTokens + t], (i % per_row) * seg.bits, (1u << seg.bits) - 1, code);
      return;
    }
    case 3: {
      put(base[(i / 4) * kGroupTokens + t], (i % 4) * 2, 3u, code);
      uint8_t* hi_plane = base + static_cast<size_t>(kGroupTokens) * (seg.dims / 4);
      put(hi_plane[(i / 8) * kGroupTokens + t], i % 8, 1u, code >> 2);
      return;
    }
    default:
      assert(false && "SetCode: unsupported width");
  }
}

}  // namespace tq::kernels
