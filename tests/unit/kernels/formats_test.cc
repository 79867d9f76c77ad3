// The format table, codebooks, rotations and page headers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "config/option_table.h"
#include "kernels/formats/codebook.h"
#include "kernels/formats/codec.h"
#include "kernels/formats/format.h"
#include "kernels/formats/page.h"
#include "kernels/formats/rng.h"
#include "kernels/formats/rotation.h"
#include "kernels/weights/half.h"

namespace tq::kernels {
namespace {

TEST(FormatTable, NamesAreUniqueAndRoundTrip) {
  std::set<std::string_view> names;
  std::set<uint8_t> ids;
  for (const FormatInfo& info : kFormatTable) {
    EXPECT_TRUE(names.insert(info.name).second) << info.name;
    EXPECT_TRUE(ids.insert(static_cast<uint8_t>(info.format)).second) << info.name;
    StatusOr<KvFormat> back = FormatFromName(info.name);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, info.format);
    EXPECT_EQ(&GetFormatInfo(info.format), &info);
  }
  EXPECT_FALSE(FormatFromName("tq5").ok());
  EXPECT_FALSE(FormatFromId(0).ok());
  EXPECT_FALSE(FormatFromId(200).ok());
}

// f32 is a row (its name, bits and id come from the table) but not a page format: every page entry point refuses
// it with the reason, and a page header that claims it does not decode.
TEST(FormatTable, F32IsARowThatNoPageTakes) {
  ASSERT_EQ(*FormatFromName("f32"), KvFormat::kF32);
  EXPECT_FALSE(IsPaged(KvFormat::kF32));
  EXPECT_FALSE(IsRotated(KvFormat::kF32));
  EXPECT_EQ(BitsPerValue(KvFormat::kF32, 64), 32.0);
  const Status s = CheckSupported(KvFormat::kF32, 64);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("plain rows"), std::string::npos) << s.ToString();
  EXPECT_FALSE(PageBytes(KvFormat::kF32, 64).ok());
  EXPECT_FALSE(KvCodec::Create(KvFormat::kF32, 64, 1).ok());
  // A page whose header names f32 (id 16) is refused, not read with some other format's layout.
  auto codec = KvCodec::Create(KvFormat::kF16, 64, 1);
  ASSERT_TRUE(codec.ok());
  std::vector<uint8_t> page(*PageBytes(KvFormat::kF16, 64));
  std::vector<float> x(64, 0.5f);
  ASSERT_TRUE((*codec)->EncodePage(x.data(), 1, page).ok());
  PageHeader header;
  std::memcpy(&header, page.data(), sizeof header);
  header.format = static_cast<uint8_t>(KvFormat::kF32);
  SealHeader(header);
  std::memcpy(page.data(), &header, sizeof header);
  EXPECT_FALSE(ReadPageHeader(page).ok());
}

// The option table (config/, which may not include kernels/) lists the format names from the table's portable
// half: exactly auto and every row, so a new format cannot be left out.
TEST(FormatTable, OptionTableNamesEveryFormat) {
  config::Config c;
  std::string want = "one of: auto";
  for (const FormatInfo& f : kFormatTable) want += ", " + std::string(f.name);
  int rows = 0;
  for (const config::Option& o : config::BuildOptionTable(&c)) {
    if (o.name != "kv.k_format" && o.name != "kv.v_format") continue;
    EXPECT_EQ(o.field->Allowed(), want) << o.name;
    ++rows;
  }
  EXPECT_EQ(rows, 2);
}

TEST(FormatTable, BitsPerValueIncludeNormsAndScales) {
  EXPECT_DOUBLE_EQ(BytesPerVector(KvFormat::kF16, 64), 128.0);
  EXPECT_DOUBLE_EQ(BitsPerValue(KvFormat::kF16, 64), 16.0);
  EXPECT_DOUBLE_EQ(BytesPerVector(KvFormat::kTq4, 64), 34.0);  // 64 * 4 / 8 + fp16 norm
  EXPECT_DOUBLE_EQ(BitsPerValue(KvFormat::kTq4, 64), 4.25);
  EXPECT_DOUBLE_EQ(BytesPerVector(KvFormat::kTq3, 128), 50.0);
  EXPECT_DOUBLE_EQ(BytesPerVector(KvFormat::kInt8, 64), 64.0 + 4.0 / 128);
  // tq2.5 at 128: 32 channels at 3 bits, 96 at 2 bits, two fp16 norms.
  EXPECT_EQ(OutlierChannels(KvFormat::kTq2_5, 128), 32);
  EXPECT_DOUBLE_EQ(BytesPerVector(KvFormat::kTq2_5, 128), (32 * 3 + 96 * 2) / 8.0 + 4);
  // tq3p: 2-bit MSE + 1-bit sketch + two norms.
  EXPECT_DOUBLE_EQ(BytesPerVector(KvFormat::kTq3p, 64), 64 * 3 / 8.0 + 4);
  // Compact rows: one byte per norm and the page's fp32 scale.
  EXPECT_DOUBLE_EQ(BytesPerVector(KvFormat::kTq3c, 64), 24.0 + 1 + 4.0 / 128);
  EXPECT_DOUBLE_EQ(PageBytes(KvFormat::kTq3c, 64).value(), 64 + 128 + 128 * 24);
  // Whole pages, header included: tq3 at d 64 is 3.3125 bits, tq3c 3.1875, tq2c 2.1875.
  EXPECT_DOUBLE_EQ(PageBitsPerValue(KvFormat::kTq3, 64), 3.3125);
  EXPECT_DOUBLE_EQ(PageBitsPerValue(KvFormat::kTq3c, 64), 3.1875);
  EXPECT_DOUBLE_EQ(PageBitsPerValue(KvFormat::kTq2c, 64), 2.1875);
  EXPECT_DOUBLE_EQ(PageBitsPerValue(KvFormat::kF16, 64), 16.0625);
}

TEST(FormatTable, UnsupportedHeadDimIsAStatus) {
  EXPECT_TRUE(CheckSupported(KvFormat::kTq4, 64).ok());
  EXPECT_TRUE(CheckSupported(KvFormat::kTq4, 80).ok());
  EXPECT_FALSE(CheckSupported(KvFormat::kTq4, 65).ok());
  EXPECT_FALSE(CheckSupported(KvFormat::kTq4, 0).ok());
  EXPECT_FALSE(CheckSupported(KvFormat::kTq4, 512).ok());
  EXPECT_FALSE(CheckSupported(KvFormat::kTq2_5, 16).ok());
  EXPECT_FALSE(PageBytes(KvFormat::kInt8, 72).ok());
}

// Lloyd-Max values for N(0, 1) (Max 1960), positive half.
const std::vector<std::vector<double>> kGaussianLloydMax = {
    {0.7979},
    {0.4528, 1.5104},
    {0.2451, 0.7560, 1.3440, 2.1520},
    {0.1284, 0.3881, 0.6568, 0.9424, 1.2562, 1.6181, 2.0690, 2.7326},
};

TEST(Codebook, MatchesGaussianLloydMaxScaledByInvSqrtD) {
  for (int dim : {128, 4096}) {
    const double tolerance = dim == 128 ? 0.02 : 0.002;  // the law tends to N(0, 1/d) as O(1/d)
    for (int bits = 1; bits <= 4; ++bits) {
      const Codebook& book = LloydMaxCodebook(dim, bits);
      ASSERT_EQ(book.centroids.size(), 1u << bits);
      const int half = 1 << (bits - 1);
      for (int i = 0; i < half; ++i) {
        const double expected = kGaussianLloydMax[bits - 1][i] / std::sqrt(static_cast<double>(dim));
        // 4-bit tables are rounded to 8 significant bits: a relative change of up to 2^-9 on top.
        const double rounding = bits == 4 ? std::ldexp(1.0, -9) : 0.0;
        EXPECT_NEAR(book.centroids[half + i], expected, (tolerance + rounding) * expected)
            << dim << " " << bits << " " << i;
        EXPECT_FLOAT_EQ(book.centroids[half - 1 - i], -book.centroids[half + i]);
      }
    }
  }
}

TEST(Codebook, ExpectedMseNearPaperFigures) {
  EXPECT_NEAR(LloydMaxCodebook(128, 1).expected_mse, 0.36, 0.01);
  EXPECT_NEAR(LloydMaxCodebook(128, 2).expected_mse, 0.117, 0.003);
  EXPECT_NEAR(LloydMaxCodebook(128, 3).expected_mse, 0.0345, 0.001);
  EXPECT_NEAR(LloydMaxCodebook(128, 4).expected_mse, 0.0095, 0.0003);
  EXPECT_GT(LloydMaxCodebook(128, 8).expected_mse, 0.0);
  EXPECT_LT(LloydMaxCodebook(128, 8).expected_mse, 1e-4);
}

// The AVX2 attention kernel looks 4-bit codes up as the top 16 bits of fp32: the tables must be exactly
// representable so (and, at these magnitudes, they are binary16 values as well, as Codebook states), and the
// rounding must cost (next to) nothing: within 0.1% of the unrounded quantizer's MSE at d = 128.
TEST(Codebook, FourBitTablesAreBfloat16AndBinary16ValuesAtNoCost) {
  for (int dim : {16, 48, 64, 80, 96, 128, 256, 4096}) {
    const Codebook& book = LloydMaxCodebook(dim, 4);
    for (float c : book.centroids) {
      EXPECT_EQ(HalfToFloat(FloatToHalf(c)), c) << dim;
      uint32_t bits;
      std::memcpy(&bits, &c, sizeof bits);
      EXPECT_EQ(bits & 0xFFFFu, 0u) << dim << " " << c;
    }
    for (size_t i = 0; i + 1 < book.centroids.size(); ++i) {
      EXPECT_FLOAT_EQ(book.boundaries[i], 0.5f * (book.centroids[i] + book.centroids[i + 1]));
    }
  }
  EXPECT_NEAR(LloydMaxCodebook(128, 4).expected_mse, 0.009315, 0.00001);  // 0.009315 before the rounding
}

TEST(Codebook, IsCachedAndQuantizesToNearest) {
  const Codebook& a = LloydMaxCodebook(64, 3);
  EXPECT_EQ(&a, &LloydMaxCodebook(64, 3));
  for (float t = -0.5f; t <= 0.5f; t += 0.01f) {
    const int got = a.Quantize(t);
    for (size_t i = 0; i < a.centroids.size(); ++i) {
      EXPECT_LE(std::abs(t - a.centroids[got]), std::abs(t - a.centroids[i]) + 1e-7f);
    }
  }
}

class RotationTest : public ::testing::TestWithParam<int> {};

TEST_P(RotationTest, HadamardAndDenseAreOrthogonal) {
  const int dim = GetParam();
  for (bool dense : {false, true}) {
    auto rot = dense ? MakeDenseRotation(dim, 7) : MakeHadamardRotation(dim, 7);
    Rng rng(1);
    std::vector<float> x(dim), y(dim), back(dim);
    for (int trial = 0; trial < 20; ++trial) {
      double nx = 0;
      for (float& v : x) {
        v = static_cast<float>(rng.Gaussian());
        nx += v * v;
      }
      rot->Forward(x.data(), y.data());
      double ny = 0;
      for (float v : y) ny += v * v;
      EXPECT_NEAR(ny, nx, 1e-4 * nx);
      rot->Inverse(y.data(), back.data());
      for (int i = 0; i < dim; ++i) EXPECT_NEAR(back[i], x[i], 1e-4f);
    }
    // A unit basis vector spreads over all coordinates (no coordinate keeps it all).
    std::fill(x.begin(), x.end(), 0.0f);
    x[3] = 1.0f;
    rot->Forward(x.data(), y.data());
    for (float v : y) EXPECT_LT(std::abs(v), 0.75f);
  }
}

INSTANTIATE_TEST_SUITE_P(Dims, RotationTest, ::testing::Values(16, 48, 64, 80, 96, 128, 256));

TEST(PageHeader, RoundTripsAndDetectsCorruption) {
  const size_t bytes = *PageBytes(KvFormat::kTq2_5, 64);
  std::vector<uint8_t> page(bytes);
  PageHeader header;
  header.format = static_cast<uint8_t>(KvFormat::kTq2_5);
  header.head_dim = 64;
  header.num_tokens = 100;
  header.seed = 42;
  for (int c = 0; c < 16; ++c) MaskSet(header.outlier_mask, c * 4);
  ASSERT_TRUE(InitPage(header, page).ok());
  StatusOr<PageHeader> read = ReadPageHeader(page);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->num_tokens, 100);
  EXPECT_EQ(read->seed, 42u);
  // Every single-bit flip in the header is caught (checksum or a field check).
  for (size_t i = 0; i < kPageHeaderBytes; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> bad = page;
      bad[i] ^= static_cast<uint8_t>(1 << bit);
      EXPECT_FALSE(ReadPageHeader(bad).ok()) << i << ":" << bit;
    }
  }
  // Truncated buffers.
  EXPECT_EQ(ReadPageHeader(std::span<const uint8_t>(page.data(), 10)).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(ReadPageHeader(std::span<const uint8_t>(page.data(), bytes - 1)).status().code(),
            StatusCode::kDataLoss);
}

// A header that is sealed (valid checksum) but says something impossible is still refused.
TEST(PageHeader, SealedButInvalidFieldsAreRefused) {
  std::vector<uint8_t> page(1 << 16);
  auto check = [&](PageHeader h, StatusCode want) {
    SealHeader(h);
    std::memcpy(page.data(), &h, sizeof(h));
    StatusOr<PageHeader> r = ReadPageHeader(page);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), want) << r.status().ToString();
  };
  PageHeader good;
  good.format = static_cast<uint8_t>(KvFormat::kTq4);
  good.head_dim = 64;
  good.num_tokens = 1;
  PageHeader h = good;
  h.format = 99;
  check(h, StatusCode::kDataLoss);
  h = good;
  h.head_dim = 72;
  check(h, StatusCode::kInvalidArgument);
  h = good;
  h.num_tokens = 129;
  check(h, StatusCode::kDataLoss);
  h = good;
  h.version = 2;
  check(h, StatusCode::kDataLoss);
  h = good;
  MaskSet(h.outlier_mask, 1);  // tq4 has no outliers
  check(h, StatusCode::kDataLoss);
  h = good;
  h.scale = 1.0f;
  check(h, StatusCode::kDataLoss);
  h = good;
  h.format = static_cast<uint8_t>(KvFormat::kInt8);
  h.scale = -1.0f;
  check(h, StatusCode::kDataLoss);
  // Compact rows keep their norms' scale in the header: negative or non-finite is corrupt.
  h = good;
  h.format = static_cast<uint8_t>(KvFormat::kTq3c);
  h.scale = -1.0f;
  check(h, StatusCode::kDataLoss);
  h.scale = std::numeric_limits<float>::infinity();
  check(h, StatusCode::kDataLoss);
}

TEST(PageLayout, SegmentsAndSizes) {
  CodeLayout tq3 = MakeCodeLayout(KvFormat::kTq3, 64);
  ASSERT_EQ(tq3.segments.size(), 1u);
  EXPECT_EQ(tq3.group_bytes, 16u * 64 * 3 / 8);
  EXPECT_EQ(tq3.page_bytes, 64u + 256 + 8 * 16 * 64 * 3 / 8);
  CodeLayout prod = MakeCodeLayout(KvFormat::kTq4p, 128);
  ASSERT_EQ(prod.segments.size(), 2u);
  EXPECT_EQ(prod.segments[0].bits, 3);
  EXPECT_EQ(prod.segments[1].domain, CodeDomain::kSketch);
  CodeLayout f16 = MakeCodeLayout(KvFormat::kF16, 64);
  EXPECT_EQ(f16.page_bytes, 64u + 128 * 128);
  // PageBytes (no layout built) agrees with the layout for every format and head_dim.
  for (const FormatInfo& info : kFormatTable) {
    for (int d = kMinHeadDim; d <= kMaxHeadDim; d += 16) {
      if (!CheckSupported(info.format, d).ok()) continue;  // f32 is never paged
      EXPECT_EQ(*PageBytes(info.format, d), MakeCodeLayout(info.format, d).page_bytes) << info.name << " " << d;
    }
  }
}

TEST(PageLayout, CodesRoundTripThroughSetAndGet) {
  for (int bits : {1, 2, 3, 4, 8}) {
    CodeSegment seg{0, 32, bits, 0, CodeDomain::kRotated, 8};
    std::vector<uint8_t> group(8 + 2 * 32 * bits, 0);
    Rng rng(bits);
    std::vector<uint32_t> codes(32 * 16);
    for (int i = 0; i < 32; ++i) {
      for (int t = 0; t < 16; ++t) {
        codes[i * 16 + t] = static_cast<uint32_t>(rng.Below(1u << bits));
        SetCode(group.data(), seg, i, t, codes[i * 16 + t]);
      }
    }
    for (int i = 0; i < 32; ++i) {
      for (int t = 0; t < 16; ++t) EXPECT_EQ(GetCode(group.data(), seg, i, t), codes[i * 16 + t]);
    }
    for (int i = 0; i < 8; ++i) EXPECT_EQ(group[i], 0);  // nothing written before the segment
  }
}

}  // namespace
}  // namespace tq::kernels
