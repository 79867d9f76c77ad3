// Entry points of the weight-matrix product, the float-weight path (F32, F16, BF16: rows decoded to f32, times
// f32 activations) and the SIMD row decoders. The int8 path for block-quantized weights is in matmul_q8.cc.
#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/matmul_q8.h"
#include "kernels/weights/half.h"
#include "kernels/weights/weight_ref.h"

// The same targets as matmul_q8.cc, AVX3_DL included.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/matmul.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tq::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

float Dot(const float* a, const float* b, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  auto acc0 = hn::Zero(d), acc1 = hn::Zero(d), acc2 = hn::Zero(d), acc3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    acc0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), acc0);
    acc1 = hn::MulAdd(hn::LoadU(d, a + i + lanes), hn::LoadU(d, b + i + lanes), acc1);
    acc2 = hn::MulAdd(hn::LoadU(d, a + i + 2 * lanes), hn::LoadU(d, b + i + 2 * lanes), acc2);
    acc3 = hn::MulAdd(hn::LoadU(d, a + i + 3 * lanes), hn::LoadU(d, b + i + 3 * lanes), acc3);
  }
  for (; i + lanes <= n; i += lanes) acc0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), acc0);
  float sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(acc0, acc1), hn::Add(acc2, acc3))));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void Axpy(float alpha, const float* x, float* y, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto va = hn::Set(d, alpha);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::MulAdd(va, hn::LoadU(d, x + i), hn::LoadU(d, y + i)), d, y + i);
  for (; i < n; ++i) y[i] += alpha * x[i];
}

// Blocks of 32 with an f16 scale: Q8_0 (int8 codes), Q4_0 and Q4_1 (nibbles; Q4_1 adds an f16 min).
template <WeightType kType>
void DecodeBlocks32(const uint8_t* row, int64_t cols, float* out) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<int32_t, decltype(df)> di;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  constexpr int64_t kBlockBytes = kType == WeightType::kQ8_0 ? 34 : (kType == WeightType::kQ4_0 ? 18 : 20);
  for (int64_t blk = 0; blk < cols / 32; ++blk) {
    const uint8_t* b = row + blk * kBlockBytes;
    uint16_t dh, mh = 0;
    std::memcpy(&dh, b, 2);
    const auto vd = hn::Set(df, HalfToFloat(dh));
    float* o = out + blk * 32;
    if constexpr (kType == WeightType::kQ8_0) {
      const hn::Rebind<int8_t, decltype(df)> d8;
      const auto* q = reinterpret_cast<const int8_t*>(b + 2);
      for (int64_t k = 0; k < 32; k += lanes) {
        hn::StoreU(hn::Mul(vd, hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, q + k)))), df, o + k);
      }
    } else if (lanes <= 16) {
      const hn::Rebind<uint8_t, decltype(df)> d8;
      const uint8_t* q = b + (kType == WeightType::kQ4_1 ? 4 : 2);
      if constexpr (kType == WeightType::kQ4_1) std::memcpy(&mh, b + 2, 2);
      const auto vm = hn::Set(df, kType == WeightType::kQ4_1 ? HalfToFloat(mh) : -8.0f * HalfToFloat(dh));
      for (int64_t k = 0; k < 16; k += lanes) {
        const auto bytes = hn::PromoteTo(di, hn::LoadU(d8, q + k));
        const auto lo = hn::ConvertTo(df, hn::And(bytes, hn::Set(di, 15)));
        const auto hi = hn::ConvertTo(df, hn::ShiftRight<4>(bytes));
        hn::StoreU(hn::MulAdd(vd, lo, vm), df, o + k);
        hn::StoreU(hn::MulAdd(vd, hi, vm), df, o + 16 + k);
      }
    } else {
      DequantizeRowRef(kType, b, o, 32);
    }
  }
}

void DecodeF16(const uint8_t* row, int64_t cols, float* out) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto* h = reinterpret_cast<const hwy::float16_t*>(row);
  int64_t i = 0;
  for (; i + lanes <= cols; i += lanes) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, h + i)), df, out + i);
  if (i < cols) DequantizeRowRef(WeightType::kF16, row + 2 * i, out + i, cols - i);
}

void DecodeBf16(const uint8_t* row, int64_t cols, float* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::Rebind<uint16_t, decltype(df)> d16;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto* h = reinterpret_cast<const uint16_t*>(row);
  int64_t i = 0;
  for (; i + lanes <= cols; i += lanes) {
    hn::StoreU(hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, h + i)))), df, out + i);
  }
  if (i < cols) DequantizeRowRef(WeightType::kBF16, row + 2 * i, out + i, cols - i);
}

void Decode(WeightType type, const uint8_t* row, int64_t cols, float* out) {
  switch (type) {
    case WeightType::kF32: std::memcpy(out, row, static_cast<size_t>(cols) * 4); return;
    case WeightType::kF16: DecodeF16(row, cols, out); return;
    case WeightType::kBF16: DecodeBf16(row, cols, out); return;
    case WeightType::kQ8_0: DecodeBlocks32<WeightType::kQ8_0>(row, cols, out); return;
    case WeightType::kQ4_0: DecodeBlocks32<WeightType::kQ4_0>(row, cols, out); return;
    case WeightType::kQ4_1: DecodeBlocks32<WeightType::kQ4_1>(row, cols, out); return;
    default: DequantizeRowRef(type, row, out, cols); return;
  }
}

// ---------------------------------------------------------------- float weights (F32, F16, BF16)

constexpr int kR = static_cast<int>(kMatMulRowTile);
constexpr int kTMax = 4;  // activation rows per tile

// out[r][t] = w[r] . x[t] for r < kR, t < kT; w[r] and x + t * cols hold `cols` floats.
template <int kT>
void FloatTile(const float* const* w, const float* x, int64_t cols, float out[kR][kTMax]) {
#if HWY_HAVE_SCALABLE  // no arrays of sizeless vectors: one dot product per pair
  for (int r = 0; r < kR; ++r) {
    for (int t = 0; t < kT; ++t) out[r][t] = Dot(w[r], x + t * cols, cols);
  }
#else
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<decltype(d)> acc[kR][kT];
  for (int r = 0; r < kR; ++r) {
    for (int t = 0; t < kT; ++t) acc[r][t] = hn::Zero(d);
  }
  int64_t i = 0;
  for (; i + lanes <= cols; i += lanes) {
    hn::Vec<decltype(d)> xv[kT];
    for (int t = 0; t < kT; ++t) xv[t] = hn::LoadU(d, x + t * cols + i);
    for (int r = 0; r < kR; ++r) {
      const auto wv = hn::LoadU(d, w[r] + i);
      for (int t = 0; t < kT; ++t) acc[r][t] = hn::MulAdd(wv, xv[t], acc[r][t]);
    }
  }
  for (int r = 0; r < kR; ++r) {
    for (int t = 0; t < kT; ++t) {
      float sum = hn::GetLane(hn::SumOfLanes(d, acc[r][t]));
      for (int64_t j = i; j < cols; ++j) sum += w[r][j] * x[t * cols + j];
      out[r][t] = sum;
    }
  }
#endif
}

void FloatRows(const MatMulArgs& a, int64_t row_begin, int64_t row_end, uint8_t* scratch) {
  float* panel = reinterpret_cast<float*>(scratch);
  const int64_t token_block = TokenBlock(a.cols * static_cast<int64_t>(sizeof(float)));
  float out[kR][kTMax];
  for (int64_t tb = 0; tb < a.batch; tb += token_block) {  // activations of a block stay in L2
    const int64_t tb_end = std::min(a.batch, tb + token_block);
    for (int64_t r0 = row_begin; r0 < row_end; r0 += kR) {
      const int n = static_cast<int>(std::min<int64_t>(kR, row_end - r0));
      const float* w[kR];
      PrefetchAhead(a.w + r0 * a.row_bytes, kR * a.row_bytes, a.w + row_end * a.row_bytes);
      for (int r = 0; r < n; ++r) {
        const uint8_t* row = a.w + (r0 + r) * a.row_bytes;
        if (a.type == WeightType::kF32) {
          w[r] = reinterpret_cast<const float*>(row);
        } else {
          Decode(a.type, row, a.cols, panel + r * a.cols);
          w[r] = panel + r * a.cols;
        }
      }
      for (int r = n; r < kR; ++r) w[r] = w[0];  // padding rows: computed, then discarded
      for (int64_t b0 = tb; b0 < tb_end; b0 += kTMax) {
        const int nt = static_cast<int>(std::min<int64_t>(kTMax, tb_end - b0));
        const float* xt = a.x + b0 * a.cols;
        switch (nt) {
          case 1: FloatTile<1>(w, xt, a.cols, out); break;
          case 2: FloatTile<2>(w, xt, a.cols, out); break;
          case 3: FloatTile<3>(w, xt, a.cols, out); break;
          default: FloatTile<4>(w, xt, a.cols, out); break;
        }
        for (int t = 0; t < nt; ++t) {
          float* yt = a.y + (b0 + t) * a.y_stride + r0;
          for (int r = 0; r < n; ++r) yt[r] = out[r][t];
        }
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tq::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tq::kernels {

HWY_EXPORT(FloatRows);
HWY_EXPORT(Decode);
HWY_EXPORT(Dot);
HWY_EXPORT(Axpy);

int64_t MatMulActivationBytes(const MatMulArgs& args) {
  return IsQ8PathType(args.type) ? Q8ActivationStride(args.cols) * args.batch : 0;
}

int64_t MatMulScratchBytes(const MatMulArgs& args) {
  return IsQ8PathType(args.type) ? Q8ScratchBytes(args.cols)
                                 : kMatMulRowTile * args.cols * static_cast<int64_t>(sizeof(float));
}

void PrepareActivations(const MatMulArgs& args, int64_t b_begin, int64_t b_end, uint8_t* acts) {
  if (IsQ8PathType(args.type)) QuantizeActivationsQ8(args.x, args.cols, b_begin, b_end, acts);
}

void MatMulRows(const MatMulArgs& args, const uint8_t* acts, int64_t row_begin, int64_t row_end, uint8_t* scratch) {
  if (IsQ8PathType(args.type)) {
    MatMulRowsQ8(args, acts, row_begin, row_end, scratch);
  } else {
    HWY_DYNAMIC_DISPATCH(FloatRows)(args, row_begin, row_end, scratch);
  }
}
void DecodeRow(WeightType type, const uint8_t* row, int64_t cols, float* out) {
  HWY_DYNAMIC_DISPATCH(Decode)(type, row, cols, out);
}
float DotF32(const float* a, const float* b, int64_t n) { return HWY_DYNAMIC_DISPATCH(Dot)(a, b, n); }
void AxpyF32(float alpha, const float* x, float* y, int64_t n) { HWY_DYNAMIC_DISPATCH(Axpy)(alpha, x, y, n); }

}  // namespace tq::kernels
#endif
