// The SIMD page encoder (KvCodec::EncodePage) against the scalar reference (EncodePageReference) on every
// SIMD target this CPU supports: the page bytes must be identical for every format, head_dim and token count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/formats/codec.h"
#include "kernels/formats/rng.h"
#include "tests/unit/simd_targets.h"

namespace tq::kernels {
namespace {

class EncodeSimd : public tq::testing::SimdTargetTest {};

// Index of the first differing byte, or -1.
long FirstDifference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return static_cast<long>(i);
  }
  return -1;
}

// Encodes x [n][d] both ways, under both norm rules, and expects the same bytes.
void ExpectSameBytes(const KvCodec& codec, const std::vector<float>& x, int n, const std::string& what) {
  for (NormRule rule : {NormRule::kLength, NormRule::kInnerProduct}) {
    const std::string how = what + (rule == NormRule::kLength ? " (length norms)" : " (inner-product norms)");
    std::vector<uint8_t> want(codec.layout().page_bytes, 0xAB), got(codec.layout().page_bytes, 0xCD);
    const Status sw = codec.EncodePageReference(x.data(), n, want, rule);
    const Status sg = codec.EncodePage(x.data(), n, got, rule);
    ASSERT_EQ(sw.code(), sg.code()) << how << ": " << sw.ToString() << " vs " << sg.ToString();
    if (!sw.ok()) continue;
    EXPECT_EQ(FirstDifference(want, got), -1)
        << how << " (page of " << want.size() << " bytes, codes from " << codec.layout().codes_offset << ")";
  }
}

std::vector<float> Gaussian(size_t count, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(count);
  for (float& x : v) x = scale * static_cast<float>(rng.Gaussian());
  return v;
}

TEST_P(EncodeSimd, SameBytesAsReferenceForEveryFormatDimAndLength) {
  const std::string target = hwy::TargetName(GetParam());
  for (const FormatInfo& info : kFormatTable) {
    for (int d = kMinHeadDim; d <= kMaxHeadDim; d += 16) {
      if (d > 128 && d != 256 && d != 192) continue;  // every size to 128, then two large ones
      auto codec = KvCodec::Create(info.format, d, 1234 + d);
      if (!codec.ok()) continue;  // outlier formats below 32; f32 (not paged)
      for (int n : {1, 5, 16, 17, 77, 128}) {
        const std::vector<float> x = Gaussian(static_cast<size_t>(n) * d, 7 * n + d);
        ExpectSameBytes(
            **codec, x, n,
            target + " " + std::string(info.name) + " d=" + std::to_string(d) + " n=" + std::to_string(n));
      }
      (*codec)->set_scale_search(false);  // the nearest-centroid codes agree too
      const std::vector<float> x = Gaussian(static_cast<size_t>(77) * d, 3 + d);
      ExpectSameBytes(**codec, x, 77,
                      target + " " + std::string(info.name) + " nearest d=" + std::to_string(d));
    }
  }
}

// Inputs with exact ties: one-hot and two-hot vectors rotate to coordinates that are exactly 0 or +-1/sqrt(d)
// times the norm (0 is the middle boundary of every even-level codebook), constant vectors, zero vectors,
// tiny and huge scales, and, for the tq formats, infinities and NaNs (the reference's upper_bound semantics:
// a NaN coordinate gets the last code unless the norm is not positive).
TEST_P(EncodeSimd, SameBytesOnTiesZerosAndExtremes) {
  const std::string target = hwy::TargetName(GetParam());
  for (const FormatInfo& info : kFormatTable) {
    if (!IsPaged(info.format)) continue;
    for (int d : {32, 64, 96, 128}) {
      auto codec = KvCodec::Create(info.format, d, 99);
      ASSERT_TRUE(codec.ok());
      const int n = 40;
      std::vector<float> x = Gaussian(static_cast<size_t>(n) * d, d);
      auto row = [&](int t) { return x.data() + static_cast<size_t>(t) * d; };
      for (int t = 0; t < 8; ++t) std::fill(row(t), row(t) + d, 0.0f);
      row(1)[3] = 1.0f;                                                          // one-hot
      row(2)[0] = 2.0f, row(2)[5] = 2.0f;                                        // two-hot
      row(3)[7] = -0.5f, row(3)[d - 1] = 0.5f;                                   // two-hot, opposite signs
      std::fill(row(4), row(4) + d, 0.25f);                                      // constant
      for (int i = 0; i < d; ++i) row(5)[i] = static_cast<float>(i % 3) - 1.0f;  // small integers
      for (int i = 0; i < d; ++i) row(6)[i] = 1e-20f * row(20)[i];               // tiny
      for (int i = 0; i < d; ++i) row(7)[i] = 1e15f * row(21)[i];                // huge (fp16 norm overflows)
      ExpectSameBytes(**codec, x, n, target + " " + std::string(info.name) + " d=" + std::to_string(d));
      if (info.kind == FormatKind::kFloat16 || info.kind == FormatKind::kInt8) continue;
      row(8)[1] = std::numeric_limits<float>::infinity();
      row(9)[2] = std::numeric_limits<float>::quiet_NaN();
      ExpectSameBytes(**codec, x, n,
                      target + " " + std::string(info.name) + " non-finite d=" + std::to_string(d));
    }
  }
}

TEST_P(EncodeSimd, Int8RobustClampAndNonFinite) {
  auto codec = KvCodec::Create(KvFormat::kInt8, 64);
  ASSERT_TRUE(codec.ok());
  std::vector<float> x = Gaussian(64 * 100, 5);
  x[77] = 1000.0f;
  for (int i = 0; i < 64; ++i) x[64 * 3 + i] = (i - 32) * 0.5f;  // exact halves: round-half-away ties
  ExpectSameBytes(**codec, x, 100, "int8");
  (*codec)->set_robust_clamp(true);
  ExpectSameBytes(**codec, x, 100, "int8 robust");
  x[130] = std::numeric_limits<float>::infinity();
  std::vector<uint8_t> page((*codec)->layout().page_bytes);
  EXPECT_EQ((*codec)->EncodePage(x.data(), 100, page).code(), StatusCode::kInvalidArgument);
  (*codec)->set_robust_clamp(false);
  EXPECT_EQ((*codec)->EncodePage(x.data(), 100, page).code(), StatusCode::kInvalidArgument);
}

TEST_P(EncodeSimd, TrainedOutlierChannels) {
  for (KvFormat f : {KvFormat::kTq2_5, KvFormat::kTq3_5}) {
    auto codec = KvCodec::Create(f, 128);
    ASSERT_TRUE(codec.ok());
    std::vector<float> x = Gaussian(128 * 128, 11);
    for (int v = 0; v < 128; ++v) {
      for (int c = 3; c < 128; c += 5) x[v * 128 + c] *= 8.0f;
    }
    ASSERT_TRUE((*codec)->Train(x.data(), 128).ok());
    ExpectSameBytes(**codec, x, 128, std::string(FormatName(f)) + " trained");
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, EncodeSimd, ::testing::ValuesIn(tq::testing::SupportedSimdTargets()),
                         tq::testing::SimdTargetName);

}  // namespace
}  // namespace tq::kernels
