// The byte layout of one KV page: one (sequence, layer, KV head) x up to kPageTokens tokens of one format.
//
//   [0, 64)                 PageHeader (little-endian)
//   [64, 64 + 128 * norm_bytes * norms)  norms, slot-major: norms[slot][kPageTokens]; fp16, or for the compact
//                           formats 8-bit codes c with norm = c * header.scale
//   then kPageTokens / kGroupTokens code groups of GroupBytes() each
//
// Inside a code group (16 tokens) codes are dimension-major, in rows of 16 bytes where byte t belongs to token t
// of the group (f16: rows of 32 bytes, two per token). A code of `w` bits (w in 1, 2, 4, 8) packs 8 / w
// consecutive coordinates into one row, coordinate j of the row at bit j * w. A 3-bit code is a 2-bit plane (low
// bits) followed by a 1-bit plane (high bit). Segments (see CodeLayout) follow one another in the group. This layout
// lets SIMD kernels decode 16 tokens of one coordinate with one load and one in-register table lookup.
// Tokens at or past num_tokens have zero codes and norms. All pages of one (format, head_dim) have PageBytes() bytes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "kernels/formats/format.h"

namespace tq::kernels {

inline constexpr uint32_t kPageMagic = 0x564b5154;  // "TQKV" in file order
inline constexpr uint16_t kPageVersion = 1;
inline constexpr size_t kPageHeaderBytes = 64;
inline constexpr uint8_t kPageFlagRobustClamp = 1;  // int8: the scale was taken after the robust clamp

// Outlier channel set, one bit per channel (channel c: byte c / 8, bit c % 8).
using OutlierMask = std::array<uint8_t, kMaxHeadDim / 8>;

struct PageHeader {
  uint32_t magic = kPageMagic;
  uint16_t version = kPageVersion;
  uint8_t format = 0;       // KvFormat id
  uint8_t flags = 0;        // kPageFlag*
  uint16_t head_dim = 0;
  uint16_t num_tokens = 0;  // valid tokens, <= kPageTokens
  float scale = 0.0f;       // int8: dequantization scale (value = code * scale); compact formats: norm = code *
                            // scale; 0 otherwise
  uint64_t seed = 0;        // rotation and projection seed (tq formats)
  uint32_t checksum = 0;    // HeaderChecksum() of the 64 header bytes with this field zero
  uint32_t reserved = 0;    // zero
  OutlierMask outlier_mask = {};  // outlier formats: exactly OutlierChannels() bits below head_dim; else zero
};
static_assert(sizeof(PageHeader) == kPageHeaderBytes);

// Which vector space a segment's codes live in.
enum class CodeDomain : uint8_t {
  kPlain,    // the original head space (f16, int8)
  kRotated,  // after the codec's rotation (tq formats)
  kSketch,   // QJL sketch space: S times the rotated vector (tq*p sign bits)
};

// A run of coordinates coded with the same width, table and norm.
struct CodeSegment {
  int first = 0;          // first coordinate in its domain
  int dims = 0;           // coordinates, a multiple of 8
  int bits = 0;           // 1, 2, 3, 4, 8, or 16 (f16)
  int norm_slot = -1;     // per-token norm that scales this segment; -1: none (f16) or the page scale (int8)
  CodeDomain domain = CodeDomain::kPlain;
  size_t group_offset = 0;  // byte offset of this segment's rows inside a code group
};

// Where everything lives in a page of (format, head_dim).
struct CodeLayout {
  KvFormat format = KvFormat::kF16;
  int head_dim = 0;
  int norms = 0;                      // norm slots per token
  int norm_bytes = 2;                 // bytes per norm: 2 (fp16) or 1 (8-bit code times the header's scale)
  std::vector<CodeSegment> segments;  // in group order
  size_t group_bytes = 0;             // bytes of one 16-token code group
  size_t norms_offset = kPageHeaderBytes;
  size_t codes_offset = 0;
  size_t page_bytes = 0;
};

// Precondition: CheckSupported(format, head_dim) is OK.
CodeLayout MakeCodeLayout(KvFormat format, int head_dim);
StatusOr<size_t> PageBytes(KvFormat format, int head_dim);

// Compact formats: the 8-bit norm codes of the first n entries of `norms` (slot-major, [slot][kPageTokens], as on
// the page): code = round(norm / scale) with scale = max(norms) / 255 over them (0 when all are 0); one scale for
// every slot. Returns the scale. The one rounding rule of every encoder (reference, SIMD, CUDA), so their pages
// agree byte for byte.
float QuantizeNorms8(const float* norms, int n, uint8_t* codes);
// The entries QuantizeNorms8 codes for a page of n tokens: every slot but the last in full (their tokens past n are
// 0), then n.
inline int CompactNormCount(const CodeLayout& layout, int n) { return (layout.norms - 1) * kPageTokens + n; }

// The norm of `token` in norm slot `slot`: fp16, or code * scale (scale = the header's) for compact formats.
float ReadNorm(const uint8_t* page, const CodeLayout& layout, int slot, int token, float scale);

uint32_t HeaderChecksum(const PageHeader& header);
// Writes a header (checksum filled in) for an empty page of `page.size()` bytes and zeroes the rest.
Status InitPage(const PageHeader& header, std::span<uint8_t> page);
// Updates the checksum after the header was changed.
void SealHeader(PageHeader& header);
// Reads and validates a header: magic, version, checksum, known format, supported head_dim, token count, flags,
// outlier mask, scale, and that `page` holds PageBytes() bytes. DataLoss for corrupt bytes, InvalidArgument for
// an unsupported (format, head_dim).
StatusOr<PageHeader> ReadPageHeader(std::span<const uint8_t> page);

inline bool MaskHas(const OutlierMask& mask, int c) { return (mask[c >> 3] >> (c & 7)) & 1; }
inline void MaskSet(OutlierMask& mask, int c) { mask[c >> 3] = static_cast<uint8_t>(mask[c >> 3] | (1 << (c & 7))); }

// Scalar code access for the reference codecs and kernels. `group` points at a code group; t in [0, 16);
// i in [0, seg.dims). Not for f16 segments.
uint32_t GetCode(const uint8_t* group, const CodeSegment& seg, int i, int t);
void SetCode(uint8_t* group, const CodeSegment& seg, int i, int t, uint32_t code);

}  // namespace tq::kernels
