// The KV cache formats: the table of portable facts (common/kv_format_table.h) and the functions over it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/kv_format_table.h"
#include "common/status.h"

namespace tq::kernels {

using ::tq::FormatInfo;
using ::tq::FormatKind;
using ::tq::kFormatTable;
using ::tq::KvFormat;

// Tokens per page (one page = one (sequence, layer, KV head) x up to this many consecutive tokens).
inline constexpr int kPageTokens = 128;
// Tokens per code group inside a page: codes are stored dimension-major within groups of this many tokens.
inline constexpr int kGroupTokens = 16;
// Supported head dimensions: multiples of 16 in [kMinHeadDim, kMaxHeadDim].
inline constexpr int kMinHeadDim = 16;
inline constexpr int kMaxHeadDim = 256;

const FormatInfo& GetFormatInfo(KvFormat format);
StatusOr<KvFormat> FormatFromName(std::string_view name);
// Format from a stored id (page header). InvalidArgument for an unknown id.
StatusOr<KvFormat> FormatFromId(uint8_t id);
inline std::string_view FormatName(KvFormat format) { return GetFormatInfo(format).name; }
// A head's key and value formats as config and the APIs write them: "FMT" when equal, else "KFMT/VFMT".
inline std::string FormatPairName(KvFormat k, KvFormat v) {
  std::string name(FormatName(k));
  if (v != k) name += "/" + std::string(FormatName(v));
  return name;
}
// True for formats whose codes live in a rotated domain (every tq* format).
bool IsRotated(KvFormat format);
// True for the formats stored in pages (all but f32, which a layer keeps as plain rows).
inline bool IsPaged(KvFormat format) { return GetFormatInfo(format).kind != FormatKind::kPlainF32; }

// InvalidArgument unless `format` is paged and supports `head_dim`.
Status CheckSupported(KvFormat format, int head_dim);

// Number of channels coded with one more bit by the outlier formats: a quarter of head_dim rounded down to a
// multiple of 8 (16 of 64, 32 of 128, 16 of 80, 24 of 96). 0 for other formats.
int OutlierChannels(KvFormat format, int head_dim);

// Code bits per vector, norms and scales excluded.
int CodeBitsPerVector(KvFormat format, int head_dim);
// Bytes per vector including its norms and its share of the per-page scale (int8, compact formats); fractional
// for those.
double BytesPerVector(KvFormat format, int head_dim);
// Bits per value including norms and scales: 8 * BytesPerVector / head_dim.
double BitsPerValue(KvFormat format, int head_dim);
// Bits per value of a whole page, every byte counted (the 64-byte header too): 8 * PageBytes / (kPageTokens *
// head_dim). Precondition: CheckSupported(format, head_dim) is OK.
double PageBitsPerValue(KvFormat format, int head_dim);
// True for the formats whose norms are 8-bit codes scaled by the page header's `scale` (the compact rows).
inline bool HasPageScale(KvFormat format) { return GetFormatInfo(format).norm_bytes == 1; }

}  // namespace tq::kernels
