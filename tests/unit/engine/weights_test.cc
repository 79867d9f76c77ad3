// Weight types: the table, the scalar reference dequantization against golden blocks decoded by the gguf
// Python package (testdata/weights_golden.txt), dot products, half conversions and quantize round trips.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>

#include "engine/model/gguf.h"
#include "kernels/weights/half.h"
#include "kernels/weights/weight_ref.h"
#include "kernels/weights/weight_types.h"
#include "tests/unit/engine/test_paths.h"

namespace tq::kernels {
namespace {

TEST(WeightTypesTest, TableFacts) {
  EXPECT_EQ(GetWeightTypeInfo(WeightType::kQ4_K).block_bytes, 144);
  EXPECT_EQ(GetWeightTypeInfo(WeightType::kQ6_K).block_bytes, 210);
  EXPECT_EQ(GetWeightTypeInfo(WeightType::kQ4_1).block_size, 32);
  EXPECT_EQ(WeightTypeName(WeightType::kBF16), "BF16");
  EXPECT_EQ(FindWeightType(4), nullptr);  // ids 4 and 5 were retired
  EXPECT_EQ(FindWeightType(12)->type, WeightType::kQ4_K);
  EXPECT_EQ(*WeightBytes(WeightType::kQ8_0, 64), 68u);
  EXPECT_FALSE(WeightBytes(WeightType::kQ8_0, 33).ok());
  int supported = 0;
  for (const WeightTypeInfo& info : AllWeightTypes()) supported += info.supported;
  EXPECT_EQ(supported, 11);
}

TEST(WeightTypesTest, UnsupportedTypeNamesTheTensor) {
  EXPECT_TRUE(CheckWeightTypeSupported(WeightType::kQ6_K, "x").ok());
  Status s = CheckWeightTypeSupported(WeightType::kQ2_K, "blk.0.ffn_down.weight");
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("blk.0.ffn_down.weight"), std::string::npos);
  EXPECT_NE(s.message().find("Q2_K"), std::string::npos);
}

TEST(WeightTypesTest, HalfConversions) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(FloatToHalf(f), h) << h;  // every half round-trips
  }
  EXPECT_EQ(HalfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);                      // rounds to inf
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // halfway: ties to even
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.5f)), 1.5f);
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);  // ties to even
}

struct Golden {
  std::string name;
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};

std::vector<Golden> LoadGolden() {
  std::ifstream in("tests/unit/engine/testdata/weights_golden.txt");
  std::vector<Golden> out;
  std::string tag, line;
  while (in >> tag) {
    Golden g;
    size_t n = 0;
    in >> g.name >> n;
    std::string hex;
    in >> hex;
    for (size_t k = 0; k + 1 < hex.size(); k += 2) {
      g.bytes.push_back(static_cast<uint8_t>(std::stoul(hex.substr(k, 2), nullptr, 16)));
    }
    std::getline(in, line);
    std::getline(in, line);
    std::istringstream values(line);
    float v;
    while (values >> v) g.values.push_back(v);
    out.push_back(std::move(g));
  }
  return out;
}

TEST(WeightRefTest, DequantizeMatchesGolden) {
  std::vector<Golden> golden = LoadGolden();
  ASSERT_EQ(golden.size(), 11u) << "run from the repository root";
  for (const Golden& g : golden) {
    const WeightTypeInfo* info = nullptr;
    for (const WeightTypeInfo& i : AllWeightTypes()) {
      if (i.name == g.name) info = &i;
    }
    ASSERT_NE(info, nullptr) << g.name;
    const int64_t n = static_cast<int64_t>(g.values.size());
    ASSERT_EQ(*WeightBytes(info->type, n), g.bytes.size()) << g.name;
    std::vector<float> out(static_cast<size_t>(n));
    DequantizeRowRef(info->type, g.bytes.data(), out.data(), n);
    for (int64_t k = 0; k < n; ++k) {
      EXPECT_NEAR(out[k], g.values[k], 1e-6f * std::max(1.0f, std::fabs(g.values[k]))) << g.name << " " << k;
    }
    // The dot product with a vector of ones is the sum of the values.
    std::vector<float> ones(static_cast<size_t>(n), 1.0f);
    double sum = 0;
    for (float v : g.values) sum += v;
    EXPECT_NEAR(DotRowRef(info->type, g.bytes.data(), ones.data(), n), sum, 1e-4 * (1 + std::fabs(sum)))
        << g.name;
  }
}

// Normalized mean squared error of quantize -> dequantize on Gaussian rows, per type.
TEST(WeightRefTest, QuantizeRoundTrip) {
  constexpr int64_t kN = 4 * kQkK;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(kN);
  for (float& v : x) v = normal(rng);
  const struct {
    WeightType type;
    double max_nmse;
  } cases[] = {
      {WeightType::kF32, 0.0},    {WeightType::kF16, 1e-6},   {WeightType::kBF16, 1e-4},
      {WeightType::kQ8_0, 1e-4},  {WeightType::kQ4_0, 0.02},  {WeightType::kQ4_1, 0.02},
      {WeightType::kQ4_K, 0.02},  {WeightType::kQ5_K, 0.006}, {WeightType::kQ6_K, 0.0015},
      {WeightType::kQ5_0, 0.006}, {WeightType::kQ5_1, 0.006},
  };
  for (const auto& c : cases) {
    std::vector<uint8_t> q(*WeightBytes(c.type, kN));
    QuantizeRowRef(c.type, x.data(), q.data(), kN);
    std::vector<float> y(kN);
    DequantizeRowRef(c.type, q.data(), y.data(), kN);
    double err = 0, norm = 0;
    for (int64_t k = 0; k < kN; ++k) {
      err += (x[k] - y[k]) * (x[k] - y[k]);
      norm += x[k] * x[k];
    }
    EXPECT_LE(err / norm, c.max_nmse) << WeightTypeName(c.type);
    // Quantizing the dequantized values again is (nearly) lossless.
    std::vector<uint8_t> q2(q.size());
    QuantizeRowRef(c.type, y.data(), q2.data(), kN);
    std::vector<float> z(kN);
    DequantizeRowRef(c.type, q2.data(), z.data(), kN);
    double drift = 0;
    for (int64_t k = 0; k < kN; ++k) drift += (y[k] - z[k]) * (y[k] - z[k]);
    EXPECT_LE(drift / norm, c.max_nmse / 4 + 1e-7) << WeightTypeName(c.type);
    // The dot product matches the dequantized vector's.
    double dot = 0;
    for (int64_t k = 0; k < kN; ++k) dot += static_cast<double>(y[k]) * x[k];
    EXPECT_NEAR(DotRowRef(c.type, q.data(), x.data(), kN), dot, 1e-3 * std::sqrt(norm))
        << WeightTypeName(c.type);
  }
}

// Whole tensors of the real models (when present in ~/.cache/tqserve/models) against sums of the same tensors
// dequantized by gguf-py (testdata/real_tensor_sums.txt): Q4_1 and Q8_0 from SmolLM2, Q4_K, Q6_K, Q5_0 and
// Q8_0 from Gemma 3 270M Q4_K_M.
TEST(WeightRefTest, RealTensorsMatchGgufPy) {
  std::ifstream in("tests/unit/engine/testdata/real_tensor_sums.txt");
  ASSERT_TRUE(in) << "run from the repository root";
  const std::string dir = std::filesystem::path(engine::testing::SmolLm2Path()).parent_path().string() + "/";
  std::string model, tensor, type;
  int64_t n = 0;
  double sum = 0, sumsq = 0;
  int checked = 0;
  std::unique_ptr<engine::GgufFile> file;
  std::string open_model;
  while (in >> model >> tensor >> type >> n >> sum >> sumsq) {
    if (!engine::testing::Exists(dir + model)) continue;
    if (open_model != model) {
      auto f = engine::GgufFile::Open(dir + model);
      ASSERT_TRUE(f.ok()) << f.status().ToString();
      file = std::move(*f);
      open_model = model;
    }
    const engine::GgufTensorInfo* t = file->FindTensor(tensor);
    ASSERT_NE(t, nullptr) << tensor;
    ASSERT_EQ(WeightTypeName(t->type), type) << tensor;
    ASSERT_EQ(t->elements(), n) << tensor;
    std::vector<float> y(static_cast<size_t>(n));
    DequantizeRowRef(t->type, t->data, y.data(), n);
    double s = 0, s2 = 0;
    for (float v : y) {
      s += v;
      s2 += static_cast<double>(v) * v;
    }
    EXPECT_NEAR(s2, sumsq, 1e-6 * sumsq) << model << " " << tensor;
    EXPECT_NEAR(s, sum, 1e-6 * std::sqrt(sumsq * static_cast<double>(n))) << model << " " << tensor;
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no model in " << dir << " (scripts/fetch-model.sh fetches SmolLM2)";
}

TEST(WeightRefTest, KnownValues) {
  // Q8_0: d = 0.5, q = 0..31 -> 0, 0.5, 1, ...
  uint8_t q8[34];
  const uint16_t half = FloatToHalf(0.5f);
  std::memcpy(q8, &half, 2);
  for (int j = 0; j < 32; ++j) q8[2 + j] = static_cast<uint8_t>(j);
  float y[32];
  DequantizeRowRef(WeightType::kQ8_0, q8, y, 32);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[31], 15.5f);
  // Q4_1: d = 1, m = -8; byte j = (j & 15) | (15 - (j & 15)) << 4.
  uint8_t q41[20];
  const uint16_t one = FloatToHalf(1.0f), minus8 = FloatToHalf(-8.0f);
  std::memcpy(q41, &one, 2);
  std::memcpy(q41 + 2, &minus8, 2);
  for (int j = 0; j < 16; ++j) q41[4 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  DequantizeRowRef(WeightType::kQ4_1, q41, y, 32);
  EXPECT_EQ(y[0], -8.0f);
  EXPECT_EQ(y[15], 7.0f);
  EXPECT_EQ(y[16], 7.0f);
  EXPECT_EQ(y[31], -8.0f);
}

}  // namespace
}  // namespace tq::kernels
