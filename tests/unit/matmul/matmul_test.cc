// MatMulRows against the scalar reference DotRowRef, for every weight type, decode (batch 1..8) and prefill
// (batch up to 64) shapes, odd row counts and row ranges, on every SIMD target the CPU supports.
//
// Tolerances, per output y = sum_i w[i] x[i] (ref in double):
//   float weights (F32, F16, BF16): |y - ref| <= 1e-5 * sum_i |w[i] x[i]|   (f32 rounding of the sums)
//   quantized weights (int8 activations): |y - ref| <= sum over activation blocks of (amax|x| / 254) * sum |w|
//     (each activation is rounded to the nearest multiple of amax / 127, so it moves by at most half of that;
//     blocks are 32 values for every type: MakeActivations puts an outlier of 50 among values near 1, so K-quant
//     activations sharing one scale per super-block of 256 would miss this bound by far)
//     plus 1e-5 * 3 * max|w| * sum_i |x[i]| for the f32 rounding of the scaled block sums (each weight is
//     sc * c + mn with |sc * c| <= 2 max|w| and |mn| <= max|w|).
#define HWY_WANT_AVX3_DL  // the same target set as tq_matmul

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/weights/half.h"
#include "kernels/weights/weight_ref.h"
#include "tests/unit/simd_targets.h"

namespace tq::kernels {
namespace {

constexpr WeightType kFloatTypes[] = {WeightType::kF32, WeightType::kF16, WeightType::kBF16};
constexpr WeightType kQuantTypes[] = {WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_1, WeightType::kQ5_0,
                                      WeightType::kQ4_K, WeightType::kQ5_K, WeightType::kQ6_K};
constexpr int64_t kBatches[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 16, 31, 64};

bool IsFloat(WeightType t) { return std::find(std::begin(kFloatTypes), std::end(kFloatTypes), t) != std::end(kFloatTypes); }

struct Matrix {
  WeightType type;
  int64_t rows, cols, row_bytes;
  std::vector<uint8_t> bytes;
};

// Rows quantized from random floats (`random_blocks` false), or random bytes with sane f16 scale fields, which
// reach every code value (Q8_0's -128, Q6_K's negative scales).
Matrix MakeMatrix(WeightType type, int64_t rows, int64_t cols, bool random_blocks, std::mt19937& rng) {
  Matrix m{type, rows, cols, static_cast<int64_t>(*WeightBytes(type, cols)), {}};
  m.bytes.resize(rows * m.row_bytes);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.5f, 1.5f);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* dst = m.bytes.data() + r * m.row_bytes;
    if (!random_blocks || IsFloat(type)) {
      const float offset = 0.3f * normal(rng);  // some rows far from zero-mean (Q4_1 / K-quant mins)
      for (float& v : row) v = 0.05f * normal(rng) + offset * 0.05f;
      QuantizeRowRef(type, row.data(), dst, cols);
      continue;
    }
    for (int64_t i = 0; i < m.row_bytes; ++i) dst[i] = static_cast<uint8_t>(rng());
    const int64_t block_bytes = GetWeightTypeInfo(type).block_bytes;
    for (uint8_t* b = dst; b < dst + m.row_bytes; b += block_bytes) {
      auto put = [&](int off, float v) {
        const uint16_t h = FloatToHalf(v);
        std::memcpy(b + off, &h, 2);
      };
      switch (type) {
        case WeightType::kQ8_0: case WeightType::kQ4_0: case WeightType::kQ5_0: put(0, 0.01f * uniform(rng)); break;
        case WeightType::kQ4_1: put(0, 0.01f * uniform(rng)); put(2, 0.05f * normal(rng)); break;
        case WeightType::kQ4_K: case WeightType::kQ5_K: put(0, 0.001f * uniform(rng)); put(2, 0.001f * uniform(rng)); break;
        case WeightType::kQ6_K: put(208, 0.0005f * uniform(rng)); break;
        default: break;
      }
    }
  }
  return m;
}

std::vector<float> MakeActivations(int64_t batch, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(batch * cols);
  for (int64_t b = 0; b < batch; ++b) {
    const float scale = std::exp(normal(rng));  // rows of different magnitudes
    for (int64_t i = 0; i < cols; ++i) x[b * cols + i] = scale * normal(rng);
  }
  // An all-zero block, a block with one outlier and a block of subnormals.
  if (cols >= 96) {
    std::fill(x.begin(), x.begin() + 32, 0.0f);
    x[40] = 50.0f;
    for (int i = 64; i < 96; ++i) x[i] = (i % 2 ? 1e-39f : -3e-40f);
  }
  return x;
}

// Y for `batch` rows of x, rows computed in two ranges split at `split` (any split is valid).
std::vector<float> RunMatMul(const Matrix& m, const std::vector<float>& x, int64_t batch, int64_t split) {
  MatMulArgs a;
  a.type = m.type;
  a.w = m.bytes.data();
  a.row_bytes = m.row_bytes;
  a.cols = m.cols;
  a.x = x.data();
  a.batch = batch;
  const int64_t y_stride = m.rows + 3;  // wider than the matrix: rows past it stay untouched
  std::vector<float> y(batch * y_stride, -7.0f);
  a.y = y.data();
  a.y_stride = y_stride;
  std::vector<uint8_t> acts(MatMulActivationBytes(a)), scratch(MatMulScratchBytes(a));
  PrepareActivations(a, 0, batch / 2, acts.data());
  PrepareActivations(a, batch / 2, batch, acts.data());
  MatMulRows(a, acts.data(), 0, split, scratch.data());
  MatMulRows(a, acts.data(), split, m.rows, scratch.data());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t r = m.rows; r < y_stride; ++r) EXPECT_EQ(y[b * y_stride + r], -7.0f);
  }
  std::vector<float> out(batch * m.rows);
  for (int64_t b = 0; b < batch; ++b) std::copy_n(y.begin() + b * y_stride, m.rows, out.begin() + b * m.rows);
  return out;
}

double Tolerance(WeightType type, const float* w, const float* x, int64_t cols) {
  double abs_prod = 0, sum_x = 0, max_w = 0, act_bound = 0;
  for (int64_t i = 0; i < cols; ++i) {
    abs_prod += std::fabs(static_cast<double>(w[i]) * x[i]);
    sum_x += std::fabs(x[i]);
    max_w = std::max(max_w, std::fabs(static_cast<double>(w[i])));
  }
  if (IsFloat(type)) return 1e-5 * abs_prod + 1e-30;
  for (int64_t b = 0; b < cols; b += 32) {
    double amax = 0, sum_w = 0;
    for (int64_t i = b; i < b + 32; ++i) {
      amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
      sum_w += std::fabs(w[i]);
    }
    act_bound += amax / 254.0 * sum_w;
  }
  return act_bound * 1.0001 + 3e-5 * max_w * sum_x + 1e-30;
}

void CheckAgainstReference(WeightType type, int64_t rows, int64_t cols, bool random_blocks, std::mt19937& rng,
                           std::span<const int64_t> batches = kBatches) {
  const Matrix m = MakeMatrix(type, rows, cols, random_blocks, rng);
  std::vector<float> w(rows * cols);
  for (int64_t r = 0; r < rows; ++r) DequantizeRowRef(type, m.bytes.data() + r * m.row_bytes, &w[r * cols], cols);
  for (int64_t batch : batches) {
    const std::vector<float> x = MakeActivations(batch, cols, rng);
    const std::vector<float> y = RunMatMul(m, x, batch, std::min<int64_t>(rows, 5));
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = m.bytes.data() + r * m.row_bytes;
        const double ref = DotRowRef(type, row, &x[b * cols], cols);
        const double tol = Tolerance(type, &w[r * cols], &x[b * cols], cols);
        ASSERT_NEAR(y[b * rows + r], ref, tol) << WeightTypeName(type) << " rows " << rows << " cols " << cols
                                               << " batch " << batch << " b " << b << " r " << r
                                               << (random_blocks ? " random blocks" : " quantized");
      }
    }
  }
}

class MatMulTest : public tq::testing::SimdTargetTest {};

TEST_P(MatMulTest, FloatTypesMatchReference) {
  std::mt19937 rng(1);
  for (WeightType type : kFloatTypes) {
    for (int64_t rows : {1, 4, 13}) {
      for (int64_t cols : {5, 37, 64, 576}) CheckAgainstReference(type, rows, cols, false, rng);
    }
  }
}

TEST_P(MatMulTest, QuantizedTypesMatchReference) {
  std::mt19937 rng(2);
  for (WeightType type : kQuantTypes) {
    const int64_t block = GetWeightTypeInfo(type).block_size;
    for (int64_t rows : {1, 4, 13}) {
      for (int64_t blocks : {1, 3}) {
        CheckAgainstReference(type, rows, blocks * block, false, rng);
        CheckAgainstReference(type, rows, blocks * block, true, rng);
      }
    }
  }
}

// Wide rows make the token blocks of a large batch small (a few dozen tokens), so a batch spans several.
TEST_P(MatMulTest, LargeBatchSpansTokenBlocks) {
  std::mt19937 rng(5);
  const int64_t batches[] = {100};
  for (WeightType type : {WeightType::kF32, WeightType::kF16, WeightType::kQ8_0, WeightType::kQ4_1,
                          WeightType::kQ4_K, WeightType::kQ6_K}) {
    CheckAgainstReference(type, 5, 32 * kQkK, false, rng, batches);
  }
}

// An activation row's result barely depends on the batch it is in: small batches (decode) and large ones
// (prefill) may take different kernels, which sum the same terms in a different order.
TEST_P(MatMulTest, ResultsDoNotDependOnBatch) {
  std::mt19937 rng(3);
  for (WeightType type : {WeightType::kF16, WeightType::kQ8_0, WeightType::kQ4_1, WeightType::kQ4_K, WeightType::kQ6_K}) {
    const Matrix m = MakeMatrix(type, 9, 512, false, rng);
    const std::vector<float> x = MakeActivations(11, 512, rng);
    const std::vector<float> all = RunMatMul(m, x, 11, 4);
    for (int64_t b = 0; b < 11; ++b) {
      const std::vector<float> xb(x.begin() + b * 512, x.begin() + (b + 1) * 512);
      const std::vector<float> one = RunMatMul(m, xb, 1, 4);
      for (int64_t r = 0; r < 9; ++r) {
        EXPECT_NEAR(one[r], all[b * 9 + r], 1e-5f * (std::fabs(one[r]) + 1.0f)) << WeightTypeName(type) << " b " << b;
      }
    }
  }
}

// Every type's product is batch-invariant: a row's result is bit for bit the same alone, in a batch of 3 (the
// direct tiles' range) and in a batch of 11 (the panel's), whatever row of the batch it is.
TEST_P(MatMulTest, BatchInvariantResultsAreBitwiseEqual) {
  std::mt19937 rng(5);
  for (WeightType type : {WeightType::kF32, WeightType::kF16, WeightType::kBF16, WeightType::kQ8_0, WeightType::kQ4_0,
                          WeightType::kQ4_1, WeightType::kQ5_0, WeightType::kQ4_K, WeightType::kQ5_K,
                          WeightType::kQ6_K}) {
    const Matrix m = MakeMatrix(type, 9, 512, false, rng);
    const std::vector<float> x = MakeActivations(11, 512, rng);
    const std::vector<float> all = RunMatMul(m, x, 11, 4);
    for (int64_t b = 0; b < 11; ++b) {
      const std::vector<float> xb(x.begin() + b * 512, x.begin() + (b + 1) * 512);
      const std::vector<float> one = RunMatMul(m, xb, 1, 4);
      std::vector<float> x3(3 * 512);
      for (int64_t j = 0; j < 3; ++j) std::copy(xb.begin(), xb.end(), x3.begin() + j * 512);
      std::copy(x.begin(), x.begin() + 512, x3.begin());  // another row first: xb is rows 1 and 2
      const std::vector<float> three = RunMatMul(m, x3, 3, 8);
      for (int64_t r = 0; r < 9; ++r) {
        ASSERT_EQ(one[r], all[b * 9 + r]) << WeightTypeName(type) << " b " << b << " r " << r;
        ASSERT_EQ(one[r], three[9 + r]) << WeightTypeName(type) << " b " << b << " r " << r;
        ASSERT_EQ(one[r], three[18 + r]) << WeightTypeName(type) << " b " << b << " r " << r;
      }
    }
  }
}

// The direct tiles (decode-sized batches) do the panel tiles' float arithmetic in the same order, so a row's
// result is bit for bit the same alone and in a batch of 11 (past every direct tile's largest batch), also at
// odd block and super-block counts.
TEST_P(MatMulTest, DirectAndPanelTilesAgreeBitwise) {
  std::mt19937 rng(6);
  for (WeightType type : {WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_1, WeightType::kQ5_0,
                          WeightType::kQ4_K, WeightType::kQ6_K}) {
    const bool k_quant = type == WeightType::kQ4_K || type == WeightType::kQ6_K;
    // Even and odd block counts (the 512-bit pairs and the last block); super-blocks of 256 for the K-quants.
    for (int64_t cols : k_quant ? std::vector<int64_t>{512, 768} : std::vector<int64_t>{512, 544, 96}) {
      const Matrix m = MakeMatrix(type, 9, cols, false, rng);
      const std::vector<float> x = MakeActivations(11, cols, rng);
      const std::vector<float> all = RunMatMul(m, x, 11, 4);
      for (int64_t b = 0; b < 11; ++b) {
        const std::vector<float> xb(x.begin() + b * cols, x.begin() + (b + 1) * cols);
        const std::vector<float> one = RunMatMul(m, xb, 1, 4);
        for (int64_t r = 0; r < 9; ++r) {
          ASSERT_EQ(one[r], all[b * 9 + r]) << WeightTypeName(type) << " cols " << cols << " b " << b << " r " << r;
        }
      }
    }
  }
}

TEST_P(MatMulTest, DecodeRowMatchesReference) {
  std::mt19937 rng(4);
  for (WeightType type : {WeightType::kF32, WeightType::kF16, WeightType::kBF16, WeightType::kQ8_0,
                          WeightType::kQ4_0, WeightType::kQ4_1, WeightType::kQ5_0, WeightType::kQ4_K,
                          WeightType::kQ5_K, WeightType::kQ6_K}) {
    const int64_t cols = 2 * kQkK;
    const Matrix m = MakeMatrix(type, 1, cols, !IsFloat(type), rng);
    std::vector<float> ref(cols), got(cols);
    DequantizeRowRef(type, m.bytes.data(), ref.data(), cols);
    DecodeRow(type, m.bytes.data(), cols, got.data());
    for (int64_t i = 0; i < cols; ++i) ASSERT_NEAR(got[i], ref[i], 1e-6f * std::fabs(ref[i])) << WeightTypeName(type);
  }
}

INSTANTIATE_TEST_SUITE_P(AllTargets, MatMulTest, ::testing::ValuesIn(tq::testing::SupportedSimdTargets()),
                         tq::testing::SimdTargetName);

}  // namespace
}  // namespace tq::kernels
