// The pieces of sensitivity calibration (engine/eval/calibrate.h) on synthetic inputs; the whole method runs
// on SmolLM2 in tests/integration/eval_cli_test.sh (stories260K's head_dim 8 is below the page kernels'
// minimum).
#include "engine/eval/calibrate.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <vector>

namespace tq::engine {
namespace {

std::vector<float> LogSoftmax(const std::vector<float>& x) {
  double sum = 0;
  for (float v : x) sum += std::exp(static_cast<double>(v));
  std::vector<float> out;
  for (float v : x) out.push_back(static_cast<float>(v - std::log(sum)));
  return out;
}

TEST(CalibrateTest, SingleHeadSpecPutsOneHeadInTheFormat) {
  const auto dir = std::filesystem::temp_directory_path() / ("tq_cal_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "single.json").string();
  HParams hp;
  hp.n_layers = 6;
  hp.n_kv_heads = 3;
  hp.n_heads = 6;
  hp.head_dim = 64;
  for (const auto& [layer, head, format] :
       {std::tuple{0, 0, "tq4"}, std::tuple{3, 1, "int8/tq3"}, std::tuple{5, 2, "tq3.5"}}) {
    auto spec = SingleHeadSpec(hp.n_layers, hp.n_kv_heads, layer, head, format, path);
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    auto layout = KvLayout::Create(hp, *spec);
    ASSERT_TRUE(layout.ok()) << layout.status().ToString();
    EXPECT_EQ((*layout)->class_heads(), (std::array<int, 3>{17, 0, 1}));
    auto want = KvLayout::Create(hp, KvSpec{.preset = std::string("uniform:") + format});
    ASSERT_TRUE(want.ok());
    for (int l = 0; l < hp.n_layers; ++l) {
      for (int h = 0; h < hp.n_kv_heads; ++h) {
        const HeadKvFormat& f = (*layout)->head(l, h);
        if (l == layer && h == head) {
          EXPECT_EQ(f.cls, PrecisionClass::kSparse);
          EXPECT_EQ(f.k, (*want)->head(0, 0).k) << format;
          EXPECT_EQ(f.v, (*want)->head(0, 0).v) << format;
        } else {
          EXPECT_EQ(f.cls, PrecisionClass::kHot);
          EXPECT_EQ(f.k, kernels::KvFormat::kF16);
          EXPECT_EQ(f.v, kernels::KvFormat::kF16);
        }
      }
    }
  }
  EXPECT_EQ(SingleHeadSpec(6, 3, 6, 0, "tq4", path).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SingleHeadSpec(6, 3, 0, -1, "tq4", path).status().code(), StatusCode::kInvalidArgument);
  auto bad = SingleHeadSpec(6, 3, 0, 0, "tq9", path);  // the spec is written; the layout rejects the format
  ASSERT_TRUE(bad.ok());
  EXPECT_FALSE(KvLayout::Create(hp, *bad).ok());
  std::filesystem::remove_all(dir);
}

TEST(CalibrateTest, MeanKldMatchesTheDefinition) {
  ThreadPool pool(3);
  const int rows = 37, vocab = 11;
  std::vector<float> ref, test;
  double want = 0;
  for (int r = 0; r < rows; ++r) {
    std::vector<float> a(vocab), b(vocab);
    for (int v = 0; v < vocab; ++v) {
      a[v] = std::sin(0.7f * v + r);
      b[v] = a[v] + 0.1f * std::cos(1.3f * v * r);
    }
    a = LogSoftmax(a);
    b = LogSoftmax(b);
    double kl = 0;
    for (int v = 0; v < vocab; ++v) kl += std::exp(static_cast<double>(a[v])) * (a[v] - b[v]);
    want += kl / rows;
    ref.insert(ref.end(), a.begin(), a.end());
    test.insert(test.end(), b.begin(), b.end());
  }
  EXPECT_NEAR(MeanKld(ref.data(), test.data(), rows, vocab, pool), want, 1e-9);
  EXPECT_GT(want, 0);
  EXPECT_EQ(MeanKld(ref.data(), ref.data(), rows, vocab, pool), 0.0);
  EXPECT_EQ(MeanKld(ref.data(), test.data(), 0, vocab, pool), 0.0);
}

TEST(CalibrateTest, MethodNames) {
  EXPECT_EQ(*ParseCalibrationMethod("sensitivity"), CalibrationMethod::kSensitivity);
  EXPECT_EQ(*ParseCalibrationMethod("concentration"), CalibrationMethod::kConcentration);
  EXPECT_EQ(ParseCalibrationMethod("entropy").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tq::engine
