// Plain structs read by the CUDA kernels (host and device code): one KV page format (a KvCodec) as the kernels see
// it, and the descriptors of a paged attention call. Pointers are device pointers. Internal to kernels/cuda.
#pragma once

#include <cstdint>

namespace tq::gpu {

inline constexpr int kMaxSegments = 2;   // as CodeLayout: at most two segments per format
inline constexpr int kMaxGroup = 8;      // query heads per KV head (GQA group) the attention kernels take
inline constexpr int kMaxCallCodecs = 4; // distinct V codecs one attention call may mix
inline constexpr int kDomainSlots = 2;   // slot 0: plain or rotated domain; slot 1: QJL sketch domain

enum class GpuKind : int32_t { kF16 = 0, kInt8 = 1, kTq = 2 };

struct GpuSegment {
  int32_t first = 0;         // first coordinate in its domain
  int32_t dims = 0;          // coordinates
  int32_t bits = 0;          // 1, 2, 3, 4, 8 (16 for f16)
  int32_t norm_slot = -1;    // fp16 norm slot, -1: none
  int32_t slot = 0;          // domain slot (0 plain/rotated, 1 sketch)
  int32_t group_offset = 0;  // byte offset inside a 16-token code group
  int32_t table_offset = 0;  // into GpuCodec::tables: [2^bits] code values
  int32_t bound_offset = 0;  // into GpuCodec::boundaries: [2^bits - 1] (rotated segments)
  int32_t rounds = 0;        // rotated segments: Hadamard rounds (1 or 2)
  int32_t param_offset = 0;  // into GpuCodec::signs / perms: [rounds][dims]
};

struct GpuCodec {
  GpuKind kind = GpuKind::kF16;
  int32_t format = 0;         // KvFormat id
  int32_t head_dim = 0;
  int32_t norms = 0;
  int32_t num_segments = 0;
  int32_t total_dims = 0;     // sum of segment dims
  int32_t group_bytes = 0;
  int32_t norms_offset = 0;
  int32_t codes_offset = 0;
  int32_t page_bytes = 0;
  uint64_t seed = 0;
  uint8_t outlier_mask[32] = {};
  // Scale search of the TurboQuant codes (kernels/formats/codebook.h): the candidate scales, first one wins
  // ties, for rotated segments of at most scale_search_max_bits bits; num_code_scales 0: nearest centroids.
  int32_t num_code_scales = 0;
  int32_t scale_search_max_bits = 0;
  float code_scales[8] = {};
  GpuSegment seg[kMaxSegments];
  const float* tables = nullptr;       // code values of every segment
  const float* boundaries = nullptr;   // Lloyd-Max boundaries of every rotated segment
  const float* signs = nullptr;        // Hadamard signs
  const int32_t* perms = nullptr;      // Hadamard permutations (two-round rotations)
  const int32_t* channel_order = nullptr;  // outlier formats: rotated coordinate i reads channel order[i]; else null
  const float* sketch = nullptr;       // tq*p: S [head_dim][head_dim] row-major; else null
  // Domain matrices A [head_dim][head_dim] row-major per slot: q_slot = A q and out += A^T acc_slot; null means
  // the identity (plain formats) or an unused slot.
  const float* domain[kDomainSlots] = {nullptr, nullptr};
};

}  // namespace tq::gpu
