// Reference codecs: round trips, the paper's MSE figures, unbiased tq*p inner products, int8 scales.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/formats/codebook.h"
#include "kernels/formats/codec.h"
#include "kernels/formats/fp16.h"
#include "kernels/formats/rng.h"

namespace tq::kernels {
namespace {

std::vector<float> Gaussian(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng.Gaussian());
  return v;
}

// Mean of ||x - x^||^2 / ||x||^2 over `pages` full pages of Gaussian vectors.
double MeasureMse(const KvCodec& codec, int pages, uint64_t seed) {
  const int d = codec.head_dim();
  std::vector<uint8_t> page(codec.layout().page_bytes);
  std::vector<float> out(static_cast<size_t>(kPageTokens) * d);
  double sum = 0;
  for (int p = 0; p < pages; ++p) {
    std::vector<float> x = Gaussian(out.size(), seed + p);
    EXPECT_TRUE(codec.EncodePage(x.data(), kPageTokens, page).ok());
    EXPECT_TRUE(codec.DecodePage(page, out.data()).ok());
    for (int t = 0; t < kPageTokens; ++t) {
      double err = 0, norm = 0;
      for (int i = 0; i < d; ++i) {
        const double a = x[t * d + i], b = out[t * d + i];
        err += (a - b) * (a - b);
        norm += a * a;
      }
      sum += err / norm;
    }
  }
  return sum / (static_cast<double>(pages) * kPageTokens);
}

// The paper's quantizer (nearest centroid per coordinate: scale search off) reproduces its figures.
TEST(Codec, MseAtD128MatchesThePaper) {
  const struct {
    KvFormat format;
    double target;
  } cases[] = {{KvFormat::kTq2, 0.116}, {KvFormat::kTq3, 0.034}, {KvFormat::kTq4, 0.0093}};
  for (const auto& c : cases) {
    auto codec = KvCodec::Create(c.format, 128);
    ASSERT_TRUE(codec.ok());
    (*codec)->set_scale_search(false);
    const double mse = MeasureMse(**codec, 40, 1000);
    EXPECT_NEAR(mse, c.target, 0.05 * c.target) << FormatName(c.format);
  }
}

// Compact formats code the norms in 8 bits against the page's largest: the MSE stays within 2% of the fp16-norm
// row's, and every decoded norm is within half a step (scale / 2) of it.
TEST(Codec, CompactNormsCostAlmostNothing) {
  const std::pair<KvFormat, KvFormat> pairs[] = {
      {KvFormat::kTq2c, KvFormat::kTq2}, {KvFormat::kTq3c, KvFormat::kTq3}, {KvFormat::kTq4c, KvFormat::kTq4}};
  for (const auto& [compact, full] : pairs) {
    for (int d : {64, 256}) {
      auto c = KvCodec::Create(compact, d);
      auto f = KvCodec::Create(full, d);
      ASSERT_TRUE(c.ok() && f.ok());
      const double mse_c = MeasureMse(**c, 20, 7), mse_f = MeasureMse(**f, 20, 7);
      EXPECT_LT(mse_c, 1.02 * mse_f) << FormatName(compact) << " d=" << d;
      EXPECT_GT(mse_c, 0.98 * mse_f) << FormatName(compact) << " d=" << d;
      EXPECT_LT(BitsPerValue(compact, d), BitsPerValue(full, d));
    }
  }
  // Norms spread over a 100x range in one page: each stored norm is within half a step (scale / 2) of the
  // fp16-norm row's (and of fp16's own rounding, 2^-11 relative), and the decoded vectors follow.
  const int d = 64;
  auto codec = KvCodec::Create(KvFormat::kTq3c, d);
  auto full = KvCodec::Create(KvFormat::kTq3, d);
  ASSERT_TRUE(codec.ok() && full.ok());
  std::vector<float> x(static_cast<size_t>(kPageTokens) * d), y(x.size()), z(x.size());
  Rng rng(3);
  for (int t = 0; t < kPageTokens; ++t) {
    const float len = 0.05f + 5.0f * t / kPageTokens;
    for (int i = 0; i < d; ++i) x[static_cast<size_t>(t) * d + i] = len * static_cast<float>(rng.Gaussian()) / 8.0f;
  }
  std::vector<uint8_t> page(*PageBytes(KvFormat::kTq3c, d)), full_page(*PageBytes(KvFormat::kTq3, d));
  ASSERT_TRUE((*codec)->EncodePage(x.data(), kPageTokens, page).ok());
  ASSERT_TRUE((*full)->EncodePage(x.data(), kPageTokens, full_page).ok());
  ASSERT_TRUE((*codec)->DecodePage(page, y.data()).ok());
  ASSERT_TRUE((*full)->DecodePage(full_page, z.data()).ok());
  const float scale = ReadPageHeader(page)->scale;
  EXPECT_GT(scale, 0.0f);
  const CodeLayout& lc = (*codec)->layout();
  const CodeLayout& lf = (*full)->layout();
  for (int t = 0; t < kPageTokens; ++t) {
    const float nc = ReadNorm(page.data(), lc, 0, t, scale), nf = ReadNorm(full_page.data(), lf, 0, t, 0.0f);
    EXPECT_NEAR(nc, nf, 0.5f * scale + nf * 1e-3f) << "token " << t;
    // Same codes, so the decoded vectors differ only by the ratio of the norms.
    for (int i = 0; i < d; ++i) {
      const size_t k = static_cast<size_t>(t) * d + i;
      EXPECT_NEAR(y[k], z[k] * (nc / nf), 1e-5f + 1e-5f * std::fabs(y[k])) << "token " << t << " i " << i;
    }
  }
}

TEST(Codec, NonPowerOfTwoRotationKeepsTheMse) {
  // Block-diagonal two-round Hadamard at 96 and 80 must code as well as the theory for a uniform rotation.
  for (int d : {48, 80, 96}) {
    auto codec = KvCodec::Create(KvFormat::kTq3, d);
    ASSERT_TRUE(codec.ok());
    (*codec)->set_scale_search(false);
    const double mse = MeasureMse(**codec, 20, 7);
    EXPECT_NEAR(mse, LloydMaxCodebook(d, 3).expected_mse, 0.05 * LloydMaxCodebook(d, 3).expected_mse) << d;
  }
}

// Scale search (the default) codes closer than the nearest centroids, by about what the theory of the
// codebooks predicts (bench/quality/scale_search_theory.py on the same law gives -9% at 3 bits and -19% at 4
// bits for d = 64, -5% and -13% for d = 128); never worse, and not at all for 8-bit codes, which it leaves
// alone.
TEST(Codec, ScaleSearchLowersTheMse) {
  const struct {
    KvFormat format;
    int d;
    double min_gain;  // relative drop of the normalized MSE
  } cases[] = {{KvFormat::kTq2, 64, 0.0},   {KvFormat::kTq3, 64, 0.06},  {KvFormat::kTq4, 64, 0.14},
               {KvFormat::kTq3, 128, 0.03}, {KvFormat::kTq4, 128, 0.09}, {KvFormat::kTq3_5, 64, 0.05}};
  for (const auto& c : cases) {
    auto codec = KvCodec::Create(c.format, c.d);
    ASSERT_TRUE(codec.ok());
    const double searched = MeasureMse(**codec, 20, 31);
    (*codec)->set_scale_search(false);
    const double nearest = MeasureMse(**codec, 20, 31);
    EXPECT_LT(searched, nearest * (1.0 - c.min_gain)) << FormatName(c.format) << " d=" << c.d;
  }
  auto codec = KvCodec::Create(KvFormat::kTq8, 64);
  ASSERT_TRUE(codec.ok());
  const double searched = MeasureMse(**codec, 4, 5);
  (*codec)->set_scale_search(false);
  EXPECT_EQ(searched, MeasureMse(**codec, 4, 5));
}

TEST(Codec, EveryFormatRoundTripsPartialPages) {
  for (const FormatInfo& info : kFormatTable) {
    if (!IsPaged(info.format)) continue;
    for (int d : {32, 64, 96, 128, 256}) {
      auto codec = KvCodec::Create(info.format, d, 99);
      ASSERT_TRUE(codec.ok()) << info.name << " " << d;
      for (int n : {1, 17, 128}) {
        std::vector<float> x = Gaussian(static_cast<size_t>(n) * d, n * 31 + d);
        std::vector<uint8_t> page((*codec)->layout().page_bytes);
        ASSERT_TRUE((*codec)->EncodePage(x.data(), n, page).ok());
        StatusOr<PageHeader> header = ReadPageHeader(page);
        ASSERT_TRUE(header.ok()) << header.status().ToString();
        EXPECT_EQ(header->num_tokens, n);
        std::vector<float> out(x.size());
        ASSERT_TRUE((*codec)->DecodePage(page, out.data()).ok());
        double err = 0, norm = 0;
        for (size_t i = 0; i < x.size(); ++i) {
          err += (x[i] - out[i]) * (x[i] - out[i]);
          norm += x[i] * x[i];
        }
        const double bound = info.kind == FormatKind::kTqProd ? 0.5 : info.bits >= 8 ? 1e-3 : 0.2;
        EXPECT_LT(err / norm, bound) << info.name << " d=" << d << " n=" << n;
        // The codec from the header decodes the same bytes identically.
        StatusOr<const KvCodec*> cached = KvCodec::ForHeader(*header);
        ASSERT_TRUE(cached.ok());
        std::vector<float> again(x.size());
        ASSERT_TRUE((*cached)->DecodePage(page, again.data()).ok());
        EXPECT_EQ(again, out);
      }
    }
  }
}

TEST(Codec, F16IsExactToHalfPrecision) {
  auto codec = KvCodec::Create(KvFormat::kF16, 64);
  ASSERT_TRUE(codec.ok());
  std::vector<float> x = Gaussian(64 * 5, 3);
  std::vector<uint8_t> page((*codec)->layout().page_bytes);
  ASSERT_TRUE((*codec)->EncodePage(x.data(), 5, page).ok());
  std::vector<float> out(x.size());
  ASSERT_TRUE((*codec)->DecodePage(page, out.data()).ok());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(out[i], RoundToHalf(x[i]));
}

TEST(Codec, HalfConversionRoundsToNearestEven) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);
  EXPECT_EQ(FloatToHalf(5.9604645e-8f), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(1.0f + 1.0f / 2048), 0x3c00);  // tie -> even
  EXPECT_EQ(FloatToHalf(1.0f + 3.0f / 2048), 0x3c02);  // tie -> even
  for (uint32_t h = 0; h < 0x7c00; ++h) EXPECT_EQ(FloatToHalf(HalfToFloat(static_cast<uint16_t>(h))), h);
}

TEST(Codec, Int8ScaleAndRobustClamp) {
  auto codec = KvCodec::Create(KvFormat::kInt8, 64);
  ASSERT_TRUE(codec.ok());
  std::vector<float> x = Gaussian(64 * 128, 5);
  x[77] = 1000.0f;  // one outlier
  std::vector<uint8_t> page((*codec)->layout().page_bytes);
  ASSERT_TRUE((*codec)->EncodePage(x.data(), 128, page).ok());
  EXPECT_NEAR(ReadPageHeader(page)->scale, 1000.0f / 127, 1e-3);
  (*codec)->set_robust_clamp(true);
  ASSERT_TRUE((*codec)->EncodePage(x.data(), 128, page).ok());
  const PageHeader header = *ReadPageHeader(page);
  EXPECT_EQ(header.flags, kPageFlagRobustClamp);
  EXPECT_LT(header.scale, 5.0f / 127);  // about 3 * 1.4826 * MAD(N(0,1)) = 3.0
  EXPECT_GT(header.scale, 2.0f / 127);
  std::vector<float> out(x.size());
  ASSERT_TRUE((*codec)->DecodePage(page, out.data()).ok());
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::abs(x[i]) < 2.5f) {
      EXPECT_NEAR(out[i], x[i], 0.5f * header.scale + 1e-6f);
    }
  }
}

TEST(Codec, TrainPicksTheStrongestChannels) {
  auto codec = KvCodec::Create(KvFormat::kTq3_5, 64);
  ASSERT_TRUE(codec.ok());
  std::vector<float> x = Gaussian(64 * 256, 11);
  for (int v = 0; v < 256; ++v) {
    for (int c = 40; c < 56; ++c) x[v * 64 + c] *= 10.0f;
  }
  ASSERT_TRUE((*codec)->Train(x.data(), 256).ok());
  for (int c = 0; c < 64; ++c) EXPECT_EQ(MaskHas((*codec)->outlier_mask(), c), c >= 40 && c < 56) << c;
  // Calibrated outliers code better than the default set on this data.
  auto plain = KvCodec::Create(KvFormat::kTq3_5, 64);
  std::vector<uint8_t> page((*codec)->layout().page_bytes);
  std::vector<float> out(64 * 128);
  auto err_of = [&](const KvCodec& c) {
    EXPECT_TRUE(c.EncodePage(x.data(), 128, page).ok());
    EXPECT_TRUE(c.DecodePage(page, out.data()).ok());
    double err = 0;
    for (size_t i = 0; i < out.size(); ++i) err += (x[i] - out[i]) * (x[i] - out[i]);
    return err;
  };
  EXPECT_LT(err_of(**codec), err_of(**plain));
}

TEST(Codec, EncodeRejectsBadArguments) {
  auto codec = KvCodec::Create(KvFormat::kTq4, 64);
  ASSERT_TRUE(codec.ok());
  std::vector<float> x(64 * 129);
  std::vector<uint8_t> page((*codec)->layout().page_bytes);
  EXPECT_FALSE((*codec)->EncodePage(x.data(), 129, page).ok());
  EXPECT_FALSE((*codec)->EncodePage(x.data(), 0, page).ok());
  EXPECT_FALSE((*codec)->EncodePage(x.data(), 1, std::span<uint8_t>(page.data(), 100)).ok());
  EXPECT_FALSE(KvCodec::Create(KvFormat::kTq4, 70).ok());
  // A page of another format is refused by DecodePage.
  auto other = KvCodec::Create(KvFormat::kTq3, 64);
  std::vector<uint8_t> page3((*other)->layout().page_bytes);
  ASSERT_TRUE((*other)->EncodePage(x.data(), 3, page3).ok());
  std::vector<float> out(64 * 3);
  EXPECT_FALSE((*codec)->DecodePage(page3, out.data()).ok());
}

// Inner-product estimate <q, x^> from a decoded vector, against the truth, over 100 seeds x 1000 vectors.
// Returns (mean error, standard error of the mean).
std::pair<double, double> InnerProductBias(KvFormat format, bool aligned) {
  const int d = 64, per_seed = 1000, seeds = 100;
  std::vector<uint8_t> page(*PageBytes(format, d));
  std::vector<float> out(static_cast<size_t>(kPageTokens) * d);
  double sum = 0, sum_sq = 0;
  long count = 0;
  Rng rng(12345);
  for (int s = 0; s < seeds; ++s) {
    auto codec = KvCodec::Create(format, d, 1000 + s);
    for (int done = 0; done < per_seed; done += kPageTokens) {
      const int n = std::min(kPageTokens, per_seed - done);
      std::vector<float> x(static_cast<size_t>(n) * d), q(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = static_cast<float>(rng.Gaussian());
        // aligned: q = x + noise, so <q, x> is large and a multiplicative bias would show.
        q[i] = aligned ? x[i] + 0.5f * static_cast<float>(rng.Gaussian()) : static_cast<float>(rng.Gaussian());
      }
      EXPECT_TRUE((*codec)->EncodePage(x.data(), n, page).ok());
      EXPECT_TRUE((*codec)->DecodePage(page, out.data()).ok());
      for (int t = 0; t < n; ++t) {
        double truth = 0, est = 0;
        for (int i = 0; i < d; ++i) {
          truth += static_cast<double>(q[t * d + i]) * x[t * d + i];
          est += static_cast<double>(q[t * d + i]) * out[t * d + i];
        }
        sum += est - truth;
        sum_sq += (est - truth) * (est - truth);
        ++count;
      }
    }
  }
  const double mean = sum / count;
  const double var = sum_sq / count - mean * mean;
  return {mean, std::sqrt(var / count)};
}

// NormRule::kInnerProduct: every decoded vector keeps its component along itself (<x^, x> = ||x||^2 up to the
// norm's rounding), so the sum of many decoded vectors (attention's weighted sum of values) does not fall short
// along the true sum the way the length rule's does (by about 1 - sqrt(1 - mse)).
TEST(Codec, InnerProductNormsLeaveNoCommonShortfall) {
  constexpr int kD = 64, kPages = 16;
  for (KvFormat format : {KvFormat::kTq2, KvFormat::kTq3, KvFormat::kTq2c, KvFormat::kTq3c}) {
    auto codec = KvCodec::Create(format, kD);
    ASSERT_TRUE(codec.ok());
    const bool compact = (*codec)->layout().norm_bytes == 1;
    const std::vector<float> mean_dir = Gaussian(kD, 5);
    double shortfall[2] = {0, 0};  // <sum(x^) - sum(x), sum(x)> / ||sum(x)||^2 for kLength, kInnerProduct
    for (NormRule rule : {NormRule::kLength, NormRule::kInnerProduct}) {
      std::vector<double> sum_x(kD, 0.0), sum_dec(kD, 0.0);
      std::vector<uint8_t> page((*codec)->layout().page_bytes);
      std::vector<float> out(static_cast<size_t>(kPageTokens) * kD);
      for (int p = 0; p < kPages; ++p) {
        std::vector<float> x = Gaussian(out.size(), 100 + p);
        for (size_t j = 0; j < x.size(); ++j) x[j] += mean_dir[j % kD];
        ASSERT_TRUE((*codec)->EncodePage(x.data(), kPageTokens, page, rule).ok());
        ASSERT_TRUE((*codec)->DecodePage(page, out.data()).ok());
        for (int t = 0; t < kPageTokens; ++t) {
          double dot = 0, norm2 = 0;
          for (int i = 0; i < kD; ++i) {
            dot += double(x[t * kD + i]) * out[t * kD + i];
            norm2 += double(x[t * kD + i]) * x[t * kD + i];
            sum_x[i] += x[t * kD + i];
            sum_dec[i] += out[t * kD + i];
          }
          // fp16 norms round to 2^-11; 8-bit ones to half a step of the page's largest norm (under 1.2% of these
          // norms, which stay within a factor 2 of each other).
          if (rule == NormRule::kInnerProduct) {
            EXPECT_NEAR(dot / norm2, 1.0, compact ? 0.012 : 0.001) << FormatName(format) << " token " << t;
          }
        }
      }
      double along = 0, ref = 0;
      for (int i = 0; i < kD; ++i) {
        along += (sum_dec[i] - sum_x[i]) * sum_x[i];
        ref += sum_x[i] * sum_x[i];
      }
      shortfall[rule == NormRule::kInnerProduct] = along / ref;
    }
    // Length: cos falls short of 1 by 6% at 2 bits, 1.7% at 3 (measured 7.4% and 2.0% here). Inner product: a
    // fifth of that is left (1.5% and 0.5%): each error is orthogonal to its own vector, not to the common part.
    EXPECT_LT(shortfall[0], format == KvFormat::kTq2 || format == KvFormat::kTq2c ? -0.03 : -0.008)
        << FormatName(format);
    EXPECT_LT(std::abs(shortfall[1]), 0.3 * std::abs(shortfall[0]))
        << FormatName(format) << ": length " << shortfall[0] << ", inner product " << shortfall[1];
  }
}

TEST(Codec, ProdInnerProductsAreUnbiased) {
  for (KvFormat format : {KvFormat::kTq3p, KvFormat::kTq4p}) {
    for (bool aligned : {true, false}) {
      auto [mean, se] = InnerProductBias(format, aligned);
      EXPECT_LT(std::abs(mean), 3 * se) << FormatName(format) << " aligned=" << aligned << " mean=" << mean
                                        << " se=" << se;
    }
  }
  // The MSE-only code is biased (it shrinks inner products by about 1 - mse): the test can see a bias.
  auto [mean, se] = InnerProductBias(KvFormat::kTq2, true);
  EXPECT_GT(std::abs(mean), 3 * se);
}

}  // namespace
}  // namespace tq::kernels
