// The KV cache formats' portable facts: one row per format, with its stable name. The bottom layer holds it so
// that config (which validates format names) and kernels (which implement the formats) read the same table;
// kernels/formats/format.h adds the functions over it and the per-backend kernels.
//
// Names are stable strings: they appear in config files, metrics and saved caches. A `switch` over KvFormat has no
// `default:`, so adding a format fails to compile until every switch handles it. The numeric ids are stored in page
// headers and never reused.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace tq {

enum class KvFormat : uint8_t {
  kF16 = 1,
  kInt8 = 2,
  kTq2 = 3,
  kTq3 = 4,
  kTq4 = 5,
  kTq8 = 6,
  kTq2_5 = 7,
  kTq3_5 = 8,
  kTq3p = 9,
  kTq4p = 10,
  kTq2c = 11,
  kTq3c = 12,
  kTq4c = 13,
  kTq2_5c = 14,
  kTq3_5c = 15,
  kF32 = 16,
};

// How a format codes one vector.
enum class FormatKind : uint8_t {
  kFloat16,     // IEEE half per value, not rotated
  kInt8,        // symmetric int8 per value, one fp32 scale per page (per head and 128-token block), not rotated
  kTqMse,       // TurboQuant_mse: rotate, `bits`-bit Lloyd-Max code per coordinate, fp16 norm
  kTqOutlier,   // outlier split: a quarter of the channels at bits+1, the rest at `bits`; two TurboQuant_mse codes
  kTqProd,      // TurboQuant_prod: (bits-1)-bit TurboQuant_mse code + 1-bit QJL sign sketch + fp16 residual norm
  kPlainF32,    // IEEE single per value in plain rows of the sequence, not in pages: a whole layer's K and V
};

struct FormatInfo {
  KvFormat format;
  std::string_view name;  // stable
  FormatKind kind;
  uint8_t bits;           // nominal bits per coordinate (see FormatKind)
  uint8_t norms;          // norms stored per vector (0 for f16 and int8)
  uint8_t norm_bytes;     // bytes per norm: 2 (fp16), or 1 (8-bit code times the page's scale: compact formats)
  std::string_view what;  // one line for `tqserve formats`
};

inline constexpr std::array<FormatInfo, 16> kFormatTable = {{
    {KvFormat::kF16, "f16", FormatKind::kFloat16, 16, 0, 2, "IEEE half, not rotated"},
    {KvFormat::kInt8, "int8", FormatKind::kInt8, 8, 0, 2,
     "symmetric int8, one fp32 scale per (head, 128-token page), optional robust clamp"},
    {KvFormat::kTq2, "tq2", FormatKind::kTqMse, 2, 1, 2, "TurboQuant_mse, 2-bit Lloyd-Max codes + fp16 norm"},
    {KvFormat::kTq3, "tq3", FormatKind::kTqMse, 3, 1, 2, "TurboQuant_mse, 3-bit Lloyd-Max codes + fp16 norm"},
    {KvFormat::kTq4, "tq4", FormatKind::kTqMse, 4, 1, 2, "TurboQuant_mse, 4-bit Lloyd-Max codes + fp16 norm"},
    {KvFormat::kTq8, "tq8", FormatKind::kTqMse, 8, 1, 2, "TurboQuant_mse, 8-bit Lloyd-Max codes + fp16 norm"},
    {KvFormat::kTq2_5, "tq2.5", FormatKind::kTqOutlier, 2, 2, 2,
     "outlier split: a quarter of the channels at 3 bits, the rest at 2; two fp16 norms"},
    {KvFormat::kTq3_5, "tq3.5", FormatKind::kTqOutlier, 3, 2, 2,
     "outlier split: a quarter of the channels at 4 bits, the rest at 3; two fp16 norms"},
    {KvFormat::kTq3p, "tq3p", FormatKind::kTqProd, 3, 2, 2,
     "TurboQuant_prod: 2-bit MSE code + 1-bit QJL sketch + fp16 norm and residual norm"},
    {KvFormat::kTq4p, "tq4p", FormatKind::kTqProd, 4, 2, 2,
     "TurboQuant_prod: 3-bit MSE code + 1-bit QJL sketch + fp16 norm and residual norm"},
    {KvFormat::kTq2c, "tq2c", FormatKind::kTqMse, 2, 1, 1, "tq2 with 8-bit norms (one fp32 scale per page)"},
    {KvFormat::kTq3c, "tq3c", FormatKind::kTqMse, 3, 1, 1, "tq3 with 8-bit norms (one fp32 scale per page)"},
    {KvFormat::kTq4c, "tq4c", FormatKind::kTqMse, 4, 1, 1, "tq4 with 8-bit norms (one fp32 scale per page)"},
    {KvFormat::kTq2_5c, "tq2.5c", FormatKind::kTqOutlier, 2, 2, 1,
     "tq2.5 with 8-bit norms (both parts' norms against one fp32 scale per page)"},
    {KvFormat::kTq3_5c, "tq3.5c", FormatKind::kTqOutlier, 3, 2, 1,
     "tq3.5 with 8-bit norms (both parts' norms against one fp32 scale per page)"},
    {KvFormat::kF32, "f32", FormatKind::kPlainF32, 32, 0, 2,
     "IEEE single in plain rows, not paged: exact (the reference); K and V of whole layers"},
}};

}  // namespace tq
