// SIMD page encoder (see encode_simd.h). One 16-token code group at a time, coordinate-major: row i of the
// scratch holds coordinate i of the group's 16 tokens, so every step is lane-wise and the codes come out in
// the page's row order. Compiled with -ffp-contract=off (kernels/CMakeLists.txt): a fused a - b * c would
// round differently from the reference; explicit MulAdd is used only where the product is exact (fp64
// products of fp32 values).
#include "kernels/formats/encode_simd.h"

#include <hwy/aligned_allocator.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/formats/codebook.h"
#include "kernels/formats/format.h"
#include "kernels/weights/half.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/formats/encode_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tq::kernels::encode_internal::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

constexpr int kT = kGroupTokens;  // tokens per group = floats per scratch row

using DF = hn::CappedTag<float, kT>;
using DI = hn::RebindToSigned<DF>;
using DU8 = hn::Rebind<uint8_t, DF>;
using DI8 = hn::Rebind<int8_t, DF>;
using DH = hn::Rebind<hwy::float16_t, DF>;
using DD = hn::CappedTag<double, kT>;
using DFD = hn::Rebind<float, DD>;
using DB = hn::CappedTag<uint8_t, kT>;
using VF = hn::Vec<DF>;
using VI = hn::Vec<DI>;
using VD = hn::Vec<DD>;

constexpr size_t kN = hn::MaxLanes(DF());   // float lanes: 16 (AVX-512), 8 (AVX2), 4 (SSE4), 1 (scalar)
constexpr size_t kBlocks = kT / kN;         // float vectors per row
constexpr size_t kND = hn::MaxLanes(DD());  // double lanes
constexpr size_t kBlocksD = kT / kND;       // double vectors per row
constexpr size_t kNB = hn::MaxLanes(DB());  // byte lanes

// Scratch for one group: rows of kT floats (or bytes, or doubles), 64-byte aligned.
struct Scratch {
  explicit Scratch(int d)
      : y(hwy::AllocateAligned<float>(static_cast<size_t>(d) * kT)),
        tmp(hwy::AllocateAligned<float>(static_cast<size_t>(d) * kT)),
        vals(hwy::AllocateAligned<float>(static_cast<size_t>(d) * kT)),
        wide(hwy::AllocateAligned<double>(static_cast<size_t>(d) * kT)),
        codes(hwy::AllocateAligned<uint8_t>(static_cast<size_t>(d) * kT)) {}
  hwy::AlignedFreeUniquePtr<float[]> y;        // [d][kT] the group's (rotated) coordinates, then the residual
  hwy::AlignedFreeUniquePtr<float[]> tmp;      // [d][kT] permutation buffer
  hwy::AlignedFreeUniquePtr<float[]> vals;     // [d][kT] chosen centroids, or QJL projections
  hwy::AlignedFreeUniquePtr<double[]> wide;    // [d][kT] the residual in fp64 (QJL)
  hwy::AlignedFreeUniquePtr<uint8_t[]> codes;  // [d][kT] one code per byte
};

// rows[i][t] = x[token0 + t][channel(i)] for t < valid, 0 for the rest. x: [n][d].
void LoadGroup(const float* x, int d, const int* channel_order, int token0, int valid, float* rows) {
  const DF df;
  const DI di;
  alignas(64) int32_t offsets[kT];
  for (int t = 0; t < kT; ++t) offsets[t] = std::min(t, valid - 1) * d;
  const float* base = x + static_cast<size_t>(token0) * d;
  if (valid == kT) {
    for (int i = 0; i < d; ++i) {
      const float* column = base + (channel_order != nullptr ? channel_order[i] : i);
      for (size_t b = 0; b < kBlocks; ++b) {
        hn::Store(hn::GatherIndex(df, column, hn::Load(di, offsets + b * kN)), df, rows + i * kT + b * kN);
      }
    }
    return;
  }
  for (int i = 0; i < d; ++i) {
    const float* column = base + (channel_order != nullptr ? channel_order[i] : i);
    for (size_t b = 0; b < kBlocks; ++b) {
      const int left = valid - static_cast<int>(b * kN);
      const auto in_range = hn::FirstN(df, static_cast<size_t>(std::clamp(left, 0, static_cast<int>(kN))));
      const VF v = hn::GatherIndex(df, column, hn::Load(di, offsets + b * kN));
      hn::Store(hn::IfThenElseZero(in_range, v), df, rows + i * kT + b * kN);
    }
  }
}

// ---- Rotation: exactly the reference's HadamardRotation::Forward, on rows. ----

// In-place unnormalized Walsh-Hadamard transform of rows [0, n), stages h = 1, 2, 4, ... (the reference's
// order; each output is the same sum of the same two values, so the results are bit-identical).
void FwhtRows(float* rows, int n) {
  const DF df;
  for (int h = 1; h < n; h *= 2) {
    for (int i = 0; i < n; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        float* a = rows + j * kT;
        float* c = rows + (j + h) * kT;
        for (size_t b = 0; b < kBlocks; ++b) {
          const VF va = hn::Load(df, a + b * kN);
          const VF vc = hn::Load(df, c + b * kN);
          hn::Store(hn::Add(va, vc), df, a + b * kN);
          hn::Store(hn::Sub(va, vc), df, c + b * kN);
        }
      }
    }
  }
}

void ScaleRows(float* rows, int n, float factor) {
  const DF df;
  const VF f = hn::Set(df, factor);
  for (int i = 0; i < n; ++i) {
    for (size_t b = 0; b < kBlocks; ++b) {
      hn::Store(hn::Mul(hn::Load(df, rows + i * kT + b * kN), f), df, rows + i * kT + b * kN);
    }
  }
}

void RotateRows(const HadamardParams& p, float* rows, float* tmp) {
  const DF df;
  for (int r = 0; r < p.rounds; ++r) {
    if (p.rounds > 1) {
      std::memcpy(tmp, rows, sizeof(float) * p.dim * kT);
      for (int i = 0; i < p.dim; ++i)
        std::memcpy(rows + i * kT, tmp + p.perms[r][i] * kT, sizeof(float) * kT);
    }
    for (int i = 0; i < p.dim; ++i) {
      const VF s = hn::Set(df, p.signs[r][i]);
      for (size_t b = 0; b < kBlocks; ++b) {
        hn::Store(hn::Mul(hn::Load(df, rows + i * kT + b * kN), s), df, rows + i * kT + b * kN);
      }
    }
    int offset = 0;  // normalized block Hadamard, blocks of the binary decomposition of dim, largest first
    for (int bit = 30; bit >= 0; --bit) {
      const int block = 1 << bit;
      if ((p.dim & block) == 0) continue;
      FwhtRows(rows + offset * kT, block);
      ScaleRows(rows + offset * kT, block, 1.0f / std::sqrt(static_cast<float>(block)));
      offset += block;
    }
  }
}

// ---- Sums over coordinates, per token, in fp64 and ascending coordinate order (the reference's). ----

// dots[t] = sum_i a[i][t] * b[i][t] for i in [0, n) (each product is exact in fp64).
void DotRows(const float* a, const float* b, int n, double* dots) {
  const DD dd;
  const DFD dfd;
  VD acc[kBlocksD];
  for (size_t k = 0; k < kBlocksD; ++k) acc[k] = hn::Zero(dd);
  for (int i = 0; i < n; ++i) {
    for (size_t k = 0; k < kBlocksD; ++k) {
      const VD va = hn::PromoteTo(dd, hn::Load(dfd, a + i * kT + k * kND));
      const VD vb = hn::PromoteTo(dd, hn::Load(dfd, b + i * kT + k * kND));
      acc[k] = hn::MulAdd(va, vb, acc[k]);
    }
  }
  for (size_t k = 0; k < kBlocksD; ++k) hn::Store(acc[k], dd, dots + k * kND);
}

// sums[t] = sum_i rows[i][t]^2 for i in [0, n).
void SumSquares(const float* rows, int n, double* sums) { DotRows(rows, rows, n, sums); }

// ---- Centroid search: code = #{k : !(t < boundary_k)} (std::upper_bound's index, NaN included). ----

// A table of at most 16 floats for lane-wise lookups: in registers where vectors hold 8 or 16 floats (one or
// two permutes), else gathered from memory.
struct SmallTable {
  static constexpr size_t kParts = kN >= 8 ? 16 / kN : 1;
  alignas(64) float entries[16] = {};
  VF part[kParts];

  explicit SmallTable(const std::vector<float>& values) {
    std::copy(values.begin(), values.end(), entries);
    const DF df;
    for (size_t p = 0; p < kParts; ++p) part[p] = hn::Load(df, entries + p * kN);
  }
  // entries[idx] per lane, idx in [0, 16).
  HWY_INLINE VF At(VI idx) const {
    const DF df;
    if constexpr (kN >= 16) {
      return hn::TableLookupLanes(part[0], hn::IndicesFromVec(df, idx));
    } else if constexpr (kN == 8) {
      const DI di;
      const auto lanes = hn::IndicesFromVec(df, hn::And(idx, hn::Set(di, 7)));
      const auto high = hn::RebindMask(df, hn::Ne(hn::And(idx, hn::Set(di, 8)), hn::Zero(di)));
      return hn::IfThenElse(high, hn::TableLookupLanes(part[1], lanes), hn::TableLookupLanes(part[0], lanes));
    } else {
      return hn::GatherIndex(df, entries, idx);
    }
  }
};

// The code of each lane of t for a codebook of at most 4 bits: #{k : !(t < bounds[k])} (the boundaries are
// ascending, so a binary search finds the same count; a NaN compares "not less" at every step, as in the
// count).
template <int kBits>
HWY_INLINE VI SmallCode(VF t, const SmallTable& bounds) {
  const DI di;
  VI code = hn::Zero(di);
  for (int step = 1 << (kBits - 1); step >= 1; step /= 2) {
    const VF bound = bounds.At(hn::Add(code, hn::Set(di, step - 1)));
    code = hn::Add(code, hn::IfThenZeroElse(hn::RebindMask(di, hn::Lt(t, bound)), hn::Set(di, step)));
  }
  return code;
}

// Scale search (codebook.h, kCodeScales), lane-wise: scales[tok] = the first scale s with the largest
// sum_i c_i t_i / sqrt(sum_i c_i^2), c_i = centroids[code of t_i * s], t = t_rows[i][tok]; fp32 sums over
// ascending i with separate multiplies and adds, as the reference's BestCodeScale. Lanes whose score is never
// a number (norm 0) keep 1.
template <int kBits>
void BestScales(const float* t_rows, int dims, const SmallTable& bounds, const SmallTable& centroids,
                float* scales) {
  const DF df;
  VF best[kBlocks];
  VF best_scale[kBlocks];
  for (size_t b = 0; b < kBlocks; ++b) {
    best[b] = hn::Set(df, -INFINITY);
    best_scale[b] = hn::Set(df, 1.0f);
  }
  for (const float s : kCodeScales) {
    const VF sv = hn::Set(df, s);
    VF dot[kBlocks];
    VF c2[kBlocks];
    for (size_t b = 0; b < kBlocks; ++b) dot[b] = c2[b] = hn::Zero(df);
    for (int i = 0; i < dims; ++i) {
      for (size_t b = 0; b < kBlocks; ++b) {
        const VF t = hn::Load(df, t_rows + i * kT + b * kN);
        const VF c = centroids.At(SmallCode<kBits>(hn::Mul(t, sv), bounds));
        dot[b] = hn::Add(dot[b], hn::Mul(c, t));
        c2[b] = hn::Add(c2[b], hn::Mul(c, c));
      }
    }
    for (size_t b = 0; b < kBlocks; ++b) {
      const VF score = hn::Div(dot[b], hn::Sqrt(c2[b]));
      const auto better = hn::Gt(score, best[b]);
      best[b] = hn::IfThenElse(better, score, best[b]);
      best_scale[b] = hn::IfThenElse(better, sv, best_scale[b]);
    }
  }
  for (size_t b = 0; b < kBlocks; ++b) hn::Store(best_scale[b], df, scales + b * kN);
}

// For rows [0, dims): t = rows[i][tok] / norm[tok] (times the lane's scale from BestScales, at most 4 bits);
// codes[i][tok] = the code of t (0 where !(norm > 0)); vals[i][tok] = centroids[code].
template <int kBits>
void Quantize(const float* rows, int dims, const float* norm, const SegmentTables& tables, bool scale_search,
              uint8_t* codes, float* vals) {
  const DF df;
  const DI di;
  const DU8 du8;
  hn::Mask<DF> positive[kBlocks];
  VF norm_v[kBlocks];
  for (size_t b = 0; b < kBlocks; ++b) {
    norm_v[b] = hn::Load(df, norm + b * kN);
    positive[b] = hn::Gt(norm_v[b], hn::Zero(df));
  }
  const float* bounds = tables.boundaries.data();
  const float* centroids = tables.centroids.data();
  constexpr int kLevels = 1 << kBits;
  if constexpr (kBits <= 4) {
    static_assert(kBits <= kScaleSearchMaxBits);
    const SmallTable bound_table(tables.boundaries);
    const SmallTable centroid_table(tables.centroids);
    // vals holds t = rows / norm until each row is overwritten with its centroids below.
    for (int i = 0; i < dims; ++i) {
      for (size_t b = 0; b < kBlocks; ++b) {
        hn::Store(hn::Div(hn::Load(df, rows + i * kT + b * kN), norm_v[b]), df, vals + i * kT + b * kN);
      }
    }
    alignas(64) float scales[kT];
    if (scale_search) {
      BestScales<kBits>(vals, dims, bound_table, centroid_table, scales);
    } else {
      std::fill(scales, scales + kT, 1.0f);
    }
    VF scale_v[kBlocks];
    for (size_t b = 0; b < kBlocks; ++b) scale_v[b] = hn::Load(df, scales + b * kN);
    for (int i = 0; i < dims; ++i) {
      for (size_t b = 0; b < kBlocks; ++b) {
        const VF t = hn::Mul(hn::Load(df, vals + i * kT + b * kN), scale_v[b]);
        VI code = SmallCode<kBits>(t, bound_table);
        code = hn::IfThenElseZero(hn::RebindMask(di, positive[b]), code);
        hn::Store(centroid_table.At(code), df, vals + i * kT + b * kN);
        hn::StoreU(hn::DemoteTo(du8, code), du8, codes + i * kT + b * kN);
      }
    }
  } else {
    // 8 bits: the high nibble by counting against every 16th boundary (in registers), then a branchless
    // upper_bound over the 15 boundaries inside that block of 16 (4 gathers instead of 8).
    static_assert(kLevels == 256);
    VF coarse[15];
    for (int j = 0; j < 15; ++j) coarse[j] = hn::Set(df, bounds[16 * j + 15]);
    const VI sixteen = hn::Set(di, 16);
    for (int i = 0; i < dims; ++i) {
      for (size_t b = 0; b < kBlocks; ++b) {
        const VF t = hn::Div(hn::Load(df, rows + i * kT + b * kN), norm_v[b]);
        VI code = hn::Zero(di);
        for (int j = 0; j < 15; ++j) {
          code = hn::Add(code, hn::IfThenZeroElse(hn::RebindMask(di, hn::Lt(t, coarse[j])), sixteen));
        }
        for (int step = 8; step >= 1; step /= 2) {
          const VF bound = hn::GatherIndex(df, bounds, hn::Add(code, hn::Set(di, step - 1)));
          code = hn::Add(code, hn::IfThenZeroElse(hn::RebindMask(di, hn::Lt(t, bound)), hn::Set(di, step)));
        }
        code = hn::IfThenElseZero(hn::RebindMask(di, positive[b]), code);
        hn::Store(hn::GatherIndex(df, centroids, code), df, vals + i * kT + b * kN);
        hn::StoreU(hn::DemoteTo(du8, code), du8, codes + i * kT + b * kN);
      }
    }
  }
}

// ---- Packing codes[dims][kT] (one code per byte) into the page's rows (page.h). ----

void PackCodes(const uint8_t* codes, int dims, int bits, uint8_t* out) {
  const DB db;
  if (bits == 8) {
    std::memcpy(out, codes, static_cast<size_t>(dims) * kT);
    return;
  }
  if (bits == 3) {  // a 2-bit plane of the low bits, then a 1-bit plane of the high bits
    const auto low = hn::Set(db, 3);
    uint8_t* hi_plane = out + static_cast<size_t>(kT) * (dims / 4);
    for (int r = 0; r < dims / 4; ++r) {
      for (size_t b = 0; b < kT; b += kNB) {
        auto acc = hn::Zero(db);
        for (int j = 0; j < 4; ++j) {
          acc =
              hn::Or(acc, hn::ShiftLeftSame(hn::And(hn::Load(db, codes + (4 * r + j) * kT + b), low), 2 * j));
        }
        hn::StoreU(acc, db, out + r * kT + b);
      }
    }
    for (int r = 0; r < dims / 8; ++r) {
      for (size_t b = 0; b < kT; b += kNB) {
        auto acc = hn::Zero(db);
        for (int j = 0; j < 8; ++j) {
          acc = hn::Or(acc,
                       hn::ShiftLeftSame(hn::ShiftRight<2>(hn::Load(db, codes + (8 * r + j) * kT + b)), j));
        }
        hn::StoreU(acc, db, hi_plane + r * kT + b);
      }
    }
    return;
  }
  const int per_row = 8 / bits;  // bits 1, 2, 4: coordinate j of a row at bit j * bits
  for (int r = 0; r < dims / per_row; ++r) {
    for (size_t b = 0; b < kT; b += kNB) {
      auto acc = hn::Zero(db);
      for (int j = 0; j < per_row; ++j) {
        acc = hn::Or(acc, hn::ShiftLeftSame(hn::Load(db, codes + (per_row * r + j) * kT + b), j * bits));
      }
      hn::StoreU(acc, db, out + r * kT + b);
    }
  }
}

// ---- QJL sketch: vals[j][t] = float(sum_i S[j][i] * r[i][t]), fp64 sums in ascending i. ----

void SketchRows(const float* sketch, const float* residual, int d, double* wide, float* vals) {
  const DD dd;
  const DFD dfd;
  for (int i = 0; i < d; ++i) {
    for (size_t b = 0; b < kBlocksD; ++b) {
      hn::Store(hn::PromoteTo(dd, hn::Load(dfd, residual + i * kT + b * kND)), dd, wide + i * kT + b * kND);
    }
  }
  constexpr int kRows = kBlocksD >= 8 ? 1 : static_cast<int>(8 / kBlocksD);  // S rows per pass (d % 16 == 0)
  for (int j0 = 0; j0 < d; j0 += kRows) {
    VD acc[kRows][kBlocksD];
    for (int jj = 0; jj < kRows; ++jj) {
      for (size_t b = 0; b < kBlocksD; ++b) acc[jj][b] = hn::Zero(dd);
    }
    for (int i = 0; i < d; ++i) {
      VD s[kRows];
      for (int jj = 0; jj < kRows; ++jj) s[jj] = hn::Set(dd, sketch[static_cast<size_t>(j0 + jj) * d + i]);
      for (size_t b = 0; b < kBlocksD; ++b) {
        const VD r = hn::Load(dd, wide + i * kT + b * kND);
        for (int jj = 0; jj < kRows; ++jj) acc[jj][b] = hn::MulAdd(s[jj], r, acc[jj][b]);  // exact products
      }
    }
    for (int jj = 0; jj < kRows; ++jj) {
      for (size_t b = 0; b < kBlocksD; ++b) {
        hn::Store(hn::DemoteTo(dfd, acc[jj][b]), dfd, vals + (j0 + jj) * kT + b * kND);
      }
    }
  }
}

// ---- Formats. ----

uint16_t* NormSlot(const EncodeJob& job, int slot) {
  return reinterpret_cast<uint16_t*>(job.page + job.layout->norms_offset) +
         static_cast<size_t>(slot) * kPageTokens;
}

// norms8: compact formats, [norms][kPageTokens] where the tokens' norms go, slot-major (coded per page by
// QuantizeNorms8); else null.
void EncodeTqGroup(const EncodeJob& job, int token0, int valid, Scratch& s, uint8_t* group, float* norms8) {
  const DF df;
  const DI di;
  const DU8 du8;
  const CodeLayout& layout = *job.layout;
  const int d = layout.head_dim;
  alignas(64) double sums[kT];
  alignas(64) double y_sums[kT];  // ||y||^2 per token
  alignas(64) double dots[kT];    // <c, y> per token (NormRule::kInnerProduct)
  alignas(64) float norm[kT];
  alignas(64) float stored[kT];
  for (size_t si = 0; si < layout.segments.size(); ++si) {
    const CodeSegment& seg = layout.segments[si];
    const SegmentTables& tables = job.segments[si];
    if (seg.domain == CodeDomain::kRotated) {
      float* rows = s.y.get() + seg.first * kT;
      RotateRows(tables.rotation, rows, s.tmp.get());
      SumSquares(rows, seg.dims, y_sums);
      for (int t = 0; t < kT; ++t) norm[t] = static_cast<float>(std::sqrt(y_sums[t]));
      switch (seg.bits) {
        case 1:
          Quantize<1>(rows, seg.dims, norm, tables, job.scale_search, s.codes.get(), s.vals.get());
          break;
        case 2:
          Quantize<2>(rows, seg.dims, norm, tables, job.scale_search, s.codes.get(), s.vals.get());
          break;
        case 3:
          Quantize<3>(rows, seg.dims, norm, tables, job.scale_search, s.codes.get(), s.vals.get());
          break;
        case 4:
          Quantize<4>(rows, seg.dims, norm, tables, job.scale_search, s.codes.get(), s.vals.get());
          break;
        case 8:
          Quantize<8>(rows, seg.dims, norm, tables, job.scale_search, s.codes.get(), s.vals.get());
          break;
      }
      // Norm correction (NormRule): ||y|| / ||c|| or ||y||^2 / <c, y>, c the chosen centroids (the reference's
      // formulas, in fp64).
      SumSquares(s.vals.get(), seg.dims, sums);
      const bool inner = job.norm_rule == NormRule::kInnerProduct;
      if (inner) DotRows(s.vals.get(), rows, seg.dims, dots);
      uint16_t* slot = norms8 == nullptr ? NormSlot(job, seg.norm_slot) + token0 : nullptr;
      for (int t = 0; t < kT; ++t) {
        const float corrected = inner && dots[t] > 0.0 ? static_cast<float>(y_sums[t] / dots[t])
                                : sums[t] > 0.0        ? static_cast<float>(norm[t] / std::sqrt(sums[t]))
                                                       : norm[t];
        if (norms8 != nullptr) {
          if (t < valid) norms8[static_cast<size_t>(seg.norm_slot) * kPageTokens + token0 + t] = corrected;
          stored[t] = corrected;
          continue;
        }
        const uint16_t half = FloatToHalf(corrected);
        if (t < valid) slot[t] = half;
        stored[t] = HalfToFloat(half);
      }
      PackCodes(s.codes.get(), seg.dims, seg.bits, group + seg.group_offset);
      if (job.sketch != nullptr) {  // the residual y - stored * c, for the QJL segment
        for (int i = 0; i < seg.dims; ++i) {
          for (size_t b = 0; b < kBlocks; ++b) {
            float* row = rows + i * kT + b * kN;
            const VF c = hn::Load(df, s.vals.get() + i * kT + b * kN);
            hn::Store(hn::Sub(hn::Load(df, row), hn::Mul(hn::Load(df, stored + b * kN), c)), df, row);
          }
        }
      }
    } else {  // kSketch: signs of S r and ||r||, r the rotated-domain residual
      SumSquares(s.y.get(), d, sums);
      uint16_t* slot = NormSlot(job, seg.norm_slot) + token0;
      for (int t = 0; t < valid; ++t) slot[t] = FloatToHalf(static_cast<float>(std::sqrt(sums[t])));
      SketchRows(job.sketch, s.y.get(), d, s.wide.get(), s.vals.get());
      for (int j = 0; j < d; ++j) {
        for (size_t b = 0; b < kBlocks; ++b) {
          const int left = valid - static_cast<int>(b * kN);
          const auto in_range =
              hn::FirstN(df, static_cast<size_t>(std::clamp(left, 0, static_cast<int>(kN))));
          const auto positive =
              hn::And(in_range, hn::Ge(hn::Load(df, s.vals.get() + j * kT + b * kN), hn::Zero(df)));
          const VI bit = hn::IfThenElseZero(hn::RebindMask(di, positive), hn::Set(di, 1));
          hn::StoreU(hn::DemoteTo(du8, bit), du8, s.codes.get() + j * kT + b * kN);
        }
      }
      PackCodes(s.codes.get(), d, 1, group + seg.group_offset);
    }
  }
}

// f16 rows: row i of the group holds 16 halfs. Targets without F16C convert in software: Highway's emulation
// truncates, while the reference rounds to nearest even.
void StoreHalfRows(const float* rows, int d, uint8_t* group) {
  hwy::float16_t* out = reinterpret_cast<hwy::float16_t*>(group);
#if HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)
  const DF df;
  const DH dh;
  for (int i = 0; i < d; ++i) {
    for (size_t b = 0; b < kBlocks; ++b) {
      hn::StoreU(hn::DemoteTo(dh, hn::Load(df, rows + i * kT + b * kN)), dh, out + i * kT + b * kN);
    }
  }
#else
  uint16_t* bits = reinterpret_cast<uint16_t*>(out);
  for (int k = 0; k < d * kT; ++k) bits[k] = FloatToHalf(rows[k]);
#endif
}

// Rounds half away from zero (std::lround) for |a| < 2^31.
VF RoundHalfAway(VF a) {
  const DF df;
  const VF t = hn::Trunc(a);
  const VF frac = hn::Sub(a, t);  // exact
  return hn::IfThenElse(hn::Ge(hn::Abs(frac), hn::Set(df, 0.5f)),
                        hn::Add(t, hn::CopySign(hn::Set(df, 1.0f), a)), t);
}

// int8: scale = max |clamp(x)| / 127 over the page; false for a non-finite value.
bool Int8Scale(const EncodeJob& job, float& scale) {
  const DF df;
  const size_t count = static_cast<size_t>(job.n) * job.layout->head_dim;  // a multiple of 16
  const VF lo = hn::Set(df, job.int8_lo), hi = hn::Set(df, job.int8_hi);
  VF max_abs = hn::Zero(df);
  auto finite = hn::FirstN(df, kN);
  for (size_t k = 0; k < count; k += kN) {
    const VF v = hn::LoadU(df, job.x + k);
    finite = hn::And(finite, hn::IsFinite(v));
    max_abs = hn::Max(max_abs, hn::Abs(hn::Min(hn::Max(v, lo), hi)));
  }
  if (!hn::AllTrue(df, finite)) return false;
  scale = hn::GetLane(hn::MaxOfLanes(df, max_abs)) / 127.0f;
  return true;
}

void StoreInt8Rows(const float* rows, int d, const EncodeJob& job, float scale, uint8_t* group) {
  const DF df;
  const DI di;
  const DI8 di8;
  const VF lo = hn::Set(df, job.int8_lo), hi = hn::Set(df, job.int8_hi);
  const VF vs = hn::Set(df, scale), limit = hn::Set(df, 127.0f);
  int8_t* out = reinterpret_cast<int8_t*>(group);
  for (int i = 0; i < d; ++i) {
    for (size_t b = 0; b < kBlocks; ++b) {
      VI code = hn::Zero(di);
      if (scale > 0.0f) {
        const VF v = hn::Min(hn::Max(hn::Load(df, rows + i * kT + b * kN), lo), hi);
        const VF q = RoundHalfAway(hn::Div(v, vs));
        code = hn::ConvertTo(di, hn::Min(hn::Max(q, hn::Neg(limit)), limit));
      }
      hn::StoreU(hn::DemoteTo(di8, code), di8, out + i * kT + b * kN);
    }
  }
}

}  // namespace

EncodeResult EncodePage(const EncodeJob& job) {
  const CodeLayout& layout = *job.layout;
  const int d = layout.head_dim;
  const FormatKind kind = GetFormatInfo(layout.format).kind;
  EncodeResult result;
  if (kind == FormatKind::kInt8 && !Int8Scale(job, result.scale)) {
    result.finite = false;
    return result;
  }
  Scratch s(d);
  alignas(64) float norms8[2 * kPageTokens] = {};  // compact: [norms <= 2][kPageTokens]
  const bool compact = layout.norm_bytes == 1;
  for (int token0 = 0; token0 < job.n; token0 += kT) {
    const int valid = std::min(kT, job.n - token0);
    uint8_t* group = job.page + layout.codes_offset + layout.group_bytes * (token0 / kT);
    LoadGroup(job.x, d, job.channel_order, token0, valid, s.y.get());
    switch (kind) {
      case FormatKind::kFloat16: StoreHalfRows(s.y.get(), d, group); break;
      case FormatKind::kInt8: StoreInt8Rows(s.y.get(), d, job, result.scale, group); break;
      case FormatKind::kPlainF32: break;  // never paged: no codec is made for it (CheckSupported)
      case FormatKind::kTqMse:
      case FormatKind::kTqOutlier:
      case FormatKind::kTqProd: EncodeTqGroup(job, token0, valid, s, group, compact ? norms8 : nullptr); break;
    }
  }
  if (compact) result.scale = QuantizeNorms8(norms8, CompactNormCount(layout, job.n), job.page + layout.norms_offset);
  return result;
}

}  // namespace tq::kernels::encode_internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tq::kernels::encode_internal {

HWY_EXPORT(EncodePage);

EncodeResult EncodePageSimd(const EncodeJob& job) {
  return HWY_DYNAMIC_DISPATCH(EncodePage)(job);
}

}  // namespace tq::kernels::encode_internal
#endif  // HWY_ONCE
