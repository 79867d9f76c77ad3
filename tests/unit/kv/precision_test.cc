#include "engine/kv/precision.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "engine/kv/kv_cache.h"

namespace tq::engine {
namespace {

HeadProfile Profile(int layers, int heads) {
  HeadProfile p;
  p.model = "test";
  p.n_layers = layers;
  p.n_kv_heads = heads;
  for (int i = 0; i < layers * heads; ++i) p.score.push_back((i * 37 % 101) / 101.0);  // distinct scores
  return p;
}

// 10 layers of 2 KV heads (4 query heads), head_dim 64.
HParams TenLayers() {
  HParams hp;
  hp.n_layers = 10;
  hp.n_kv_heads = 2;
  hp.n_heads = 4;
  hp.head_dim = 64;
  return hp;
}

TEST(PrecisionTest, PresetsSplitHeadsByShare) {
  const HeadProfile p = Profile(10, 10);  // 100 heads
  for (const auto& [name, hot, active] : {std::tuple{"code", 15, 70}, std::tuple{"longdoc", 10, 60},
                                          std::tuple{"chat", 20, 65}, std::tuple{"auto", 10, 50}}) {
    auto preset = FindPreset(name);
    ASSERT_TRUE(preset.ok());
    const auto classes = AssignClasses(p, *preset);
    EXPECT_EQ(std::count(classes.begin(), classes.end(), PrecisionClass::kHot), hot) << name;
    EXPECT_EQ(std::count(classes.begin(), classes.end(), PrecisionClass::kActive), active) << name;
    // Every HOT head scores at least as high as every ACTIVE head, and ACTIVE over SPARSE.
    double min_hot = 2, max_active = -1, min_active = 2, max_sparse = -1;
    for (size_t i = 0; i < classes.size(); ++i) {
      if (classes[i] == PrecisionClass::kHot) min_hot = std::min(min_hot, p.score[i]);
      if (classes[i] == PrecisionClass::kActive) {
        max_active = std::max(max_active, p.score[i]);
        min_active = std::min(min_active, p.score[i]);
      }
      if (classes[i] == PrecisionClass::kSparse) max_sparse = std::max(max_sparse, p.score[i]);
    }
    EXPECT_GE(min_hot, max_active);
    EXPECT_GE(min_active, max_sparse);
  }
  EXPECT_FALSE(FindPreset("fastest").ok());
}

TEST(PrecisionTest, ProfileRoundTripAndBadFiles) {
  const auto dir = std::filesystem::temp_directory_path() / ("tq_prec_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "p.json").string();
  const HeadProfile p = Profile(3, 2);
  ASSERT_TRUE(SaveHeadProfile(p, path).ok());
  auto back = LoadHeadProfile(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->score, p.score);
  EXPECT_EQ(back->n_layers, 3);
  std::ofstream(dir / "bad.json") << R"({"n_layers": 2, "n_kv_heads": 2, "score": [[1, 2]]})";
  EXPECT_EQ(LoadHeadProfile((dir / "bad.json").string()).status().code(), StatusCode::kInvalidArgument);
  std::ofstream(dir / "junk.json") << "{not json";
  EXPECT_EQ(LoadHeadProfile((dir / "junk.json").string()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadHeadProfile((dir / "none.json").string()).status().code(), StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

TEST(PrecisionTest, LayoutFromPresetAndProfile) {
  const auto dir = std::filesystem::temp_directory_path() / ("tq_prec2_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "p.json").string();
  ASSERT_TRUE(SaveHeadProfile(Profile(10, 2), path).ok());
  HParams hp = TenLayers();
  KvSpec spec;
  spec.preset = "longdoc";
  spec.profile_path = path;
  auto layout = KvLayout::Create(hp, spec);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_EQ((*layout)->class_heads(), (std::array<int, 3>{2, 12, 6}));
  // Class formats: hot f16, active int8, sparse tq4 (defaults); bits per value between tq4's and f16's.
  EXPECT_GT((*layout)->bits_per_value(), 4.25);
  EXPECT_LT((*layout)->bits_per_value(), 16.0);
  spec.sparse_format = "int8/tq3";
  auto mixed = KvLayout::Create(hp, spec);
  ASSERT_TRUE(mixed.ok());
  for (int l = 0; l < 10; ++l) {
    for (int h = 0; h < 2; ++h) {
      if ((*mixed)->head(l, h).cls == PrecisionClass::kSparse) {
        EXPECT_EQ((*mixed)->head(l, h).k, kernels::KvFormat::kInt8);
        EXPECT_EQ((*mixed)->head(l, h).v, kernels::KvFormat::kTq3);
      }
    }
  }
  spec.profile_path.clear();
  EXPECT_EQ(KvLayout::Create(hp, spec).status().code(),
            StatusCode::kInvalidArgument);  // ranked preset, no profile
  spec.preset = "uniform:tq3";
  auto uniform = KvLayout::Create(hp, spec);
  ASSERT_TRUE(uniform.ok());
  EXPECT_EQ((*uniform)->head(5, 1).k, kernels::KvFormat::kTq3);
  hp.n_layers = 12;  // profile shape mismatch
  spec.preset = "chat";
  spec.profile_path = path;
  EXPECT_EQ(KvLayout::Create(hp, spec).status().code(), StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

// The server's default needs no profile: the outer layers ACTIVE, the inner SPARSE, in the preset's own formats
// (kv.active_format / kv.sparse_format "auto"); explicit formats and a given profile still win.
TEST(PrecisionTest, DefaultPresetRanksByDepthWithoutAProfile) {
  const HeadProfile depth = DepthProfile(10, 2);
  EXPECT_EQ(depth.method, "depth");
  EXPECT_GT(depth.score[0], depth.score[8]);        // layer 0 before layer 4
  EXPECT_EQ(depth.score[0], depth.score[9 * 2]);    // first and last layers alike
  EXPECT_EQ(depth.score[4 * 2], depth.score[5 * 2]);  // the two middle layers alike
  auto preset = FindPreset("default");
  ASSERT_TRUE(preset.ok());
  EXPECT_FALSE(preset->needs_profile);
  EXPECT_TRUE(FindPreset("longdoc")->needs_profile);
  EXPECT_FALSE(FindPreset("6x")->needs_profile);

  HParams hp = TenLayers();
  KvSpec spec;
  spec.preset = "default";
  auto layout = KvLayout::Create(hp, spec);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  // 10 layers: the boundary layers 0, 1, 8, 9 HOT; the rest of the outer half ACTIVE; the inner half SPARSE.
  const int active = static_cast<int>(std::lround(kDefaultPreset.active * 20));
  const int hot = 2 * 2 * kDefaultPreset.boundary_layers;
  EXPECT_EQ((*layout)->class_heads(), (std::array<int, 3>{hot, active - hot, 20 - active}));
  auto active_formats = KvLayout::Create(hp, KvSpec{.preset = "uniform:" + std::string(kDefaultPreset.active_format)});
  ASSERT_TRUE(active_formats.ok());
  EXPECT_EQ((*layout)->head(0, 0).cls, PrecisionClass::kHot);  // outermost layer
  EXPECT_EQ((*layout)->head(0, 0).k, kernels::KvFormat::kF16);
  const int outer = kDefaultPreset.boundary_layers;  // the first layer past the boundary
  EXPECT_EQ((*layout)->head(outer, 0).cls, PrecisionClass::kActive);
  EXPECT_EQ((*layout)->head(outer, 0).k, (*active_formats)->head(0, 0).k);
  EXPECT_EQ((*layout)->head(outer, 0).v, (*active_formats)->head(0, 0).v);
  EXPECT_EQ((*layout)->head(5, 1).cls, PrecisionClass::kSparse);  // a middle layer
  // Adaptation's new classes leave the boundary layers f16.
  auto adapted = (*layout)->WithClasses(std::vector<PrecisionClass>(20, PrecisionClass::kSparse));
  EXPECT_EQ(adapted->head(0, 0).k, kernels::KvFormat::kF16);
  EXPECT_EQ(adapted->head(9, 1).k, kernels::KvFormat::kF16);
  // A model with fewer layers than the preset's boundary keeps half of them f16.
  hp.n_layers = 3;
  auto small = KvLayout::Create(hp, spec);
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  hp.n_layers = 10;
  EXPECT_NE((*layout)->Describe().find("ranked by depth"), std::string::npos) << (*layout)->Describe();
  // kv.boundary_layers -1 (the default) takes the preset's; an explicit value overrides it, smaller or larger.
  for (const int n : {0, 1, 3}) {
    KvSpec b = spec;
    b.boundary_layers = n;
    auto bl = KvLayout::Create(hp, b);
    ASSERT_TRUE(bl.ok()) << bl.status().ToString();
    EXPECT_EQ((*bl)->head(0, 0).k == kernels::KvFormat::kF16, n > 0) << n;
    EXPECT_EQ((*bl)->head(n == 0 ? 0 : n - 1, 1).k == kernels::KvFormat::kF16, n > 0) << n;
    EXPECT_NE((*bl)->head(n, 0).k, kernels::KvFormat::kF16) << n;  // the first layer past the boundary
    EXPECT_NE((*bl)->head(9 - n, 0).k, kernels::KvFormat::kF16) << n;
  }
  EXPECT_FALSE(KvLayout::Create(hp, KvSpec{.boundary_layers = -2, .preset = "default"}).ok());
  EXPECT_FALSE(KvLayout::Create(hp, KvSpec{.boundary_layers = 6, .preset = "default"}).ok());
  spec.sparse_format = "tq3";
  auto explicit_sparse = KvLayout::Create(hp, spec);
  ASSERT_TRUE(explicit_sparse.ok());
  EXPECT_EQ((*explicit_sparse)->head(5, 1).v, kernels::KvFormat::kTq3);

  // uniform:f16 is uncompressed KV: every head HOT, as without a preset.
  auto f16 = KvLayout::Create(hp, KvSpec{.preset = "uniform:f16"});
  ASSERT_TRUE(f16.ok());
  EXPECT_EQ((*f16)->class_heads(), (std::array<int, 3>{20, 0, 0}));
}

// The low-bit presets: every head ACTIVE (warm tier) in one compact format, no profile, no f16 layers; 6x is
// within issue 38's 2.7 bits per value counting every byte of a page, at head_dim 64, 128 and 256, and takes
// tq2.5c values only where they fit (head_dim 256: 2.69 bits; 128: 2.75); 5x takes tq3.5c keys within 3.2 bits
// (head_dim 256: 3.19; 128: 3.25). At head_dim 16, where the outlier formats do not exist, 6x falls back to
// tq3c/tq2c (whose header and norms cost more there: 3.25 bits).
TEST(PrecisionTest, LowBitPresetsPutEveryHeadInOneCompactFormat) {
  HParams hp = TenLayers();
  using kernels::KvFormat;
  for (const auto& [name, d, k, v, max_bits] : {std::tuple{"5x", 64, KvFormat::kTq3c, KvFormat::kTq3c, 3.2},
                                                std::tuple{"6x", 16, KvFormat::kTq3c, KvFormat::kTq2c, 3.25},
                                                std::tuple{"5x", 128, KvFormat::kTq3c, KvFormat::kTq3c, 3.2},
                                                std::tuple{"5x", 256, KvFormat::kTq3_5c, KvFormat::kTq3c, 3.2},
                                                std::tuple{"6x", 64, KvFormat::kTq3c, KvFormat::kTq2c, 2.7},
                                                std::tuple{"6x", 128, KvFormat::kTq3c, KvFormat::kTq2c, 2.7},
                                                std::tuple{"6x", 256, KvFormat::kTq3c, KvFormat::kTq2_5c, 2.7}}) {
    hp.head_dim = d;
    auto layout = KvLayout::Create(hp, KvSpec{.preset = name});
    ASSERT_TRUE(layout.ok()) << name << ": " << layout.status().ToString();
    EXPECT_EQ((*layout)->class_heads(), (std::array<int, 3>{0, 20, 0})) << name;
    for (int l = 0; l < 10; ++l) {
      EXPECT_EQ((*layout)->head(l, 1).k, k) << name << " d=" << d << " layer " << l;
      EXPECT_EQ((*layout)->head(l, 1).v, v) << name << " d=" << d << " layer " << l;
    }
    EXPECT_LE((*layout)->page_bits_per_value(), max_bits) << name << " d=" << d;
    if (d >= 64) {
      EXPECT_GE(16.0 / (*layout)->page_bits_per_value(), name == std::string("5x") ? 5.0 : 5.9) << name;
    }
  }
  // An explicit ACTIVE format still wins over the preset's, at any head_dim.
  for (int d : {64, 256}) {
    hp.head_dim = d;
    auto mixed = KvLayout::Create(hp, KvSpec{.preset = "6x", .active_format = "tq4c/tq2c"});
    ASSERT_TRUE(mixed.ok()) << mixed.status().ToString();
    EXPECT_EQ((*mixed)->head(3, 0).k, kernels::KvFormat::kTq4c);
    EXPECT_EQ((*mixed)->head(3, 0).v, kernels::KvFormat::kTq2c);
  }
}

TEST(PrecisionTest, ExplicitSharesPreset) {
  auto p = FindPreset("10:50:40");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->name, "shares");
  EXPECT_DOUBLE_EQ(p->hot, 0.1);
  EXPECT_DOUBLE_EQ(p->active, 0.5);
  p = FindPreset("1:1:2");  // proportions, any sum
  ASSERT_TRUE(p.ok());
  EXPECT_DOUBLE_EQ(p->hot, 0.25);
  EXPECT_DOUBLE_EQ(p->active, 0.25);
  // N-1:0:1 leaves exactly one head SPARSE: the lowest-scoring one.
  const HeadProfile prof = Profile(30, 3);
  auto one = FindPreset("89:0:1");
  ASSERT_TRUE(one.ok());
  const auto classes = AssignClasses(prof, *one);
  ASSERT_EQ(std::count(classes.begin(), classes.end(), PrecisionClass::kSparse), 1);
  const size_t lowest = std::min_element(prof.score.begin(), prof.score.end()) - prof.score.begin();
  EXPECT_EQ(classes[lowest], PrecisionClass::kSparse);
  EXPECT_EQ(std::count(classes.begin(), classes.end(), PrecisionClass::kHot), 89);
  for (const char* bad : {"1:2", "1:2:3:4", "a:b:c", "0:0:0", "-1:1:1", "1::1", "1:1:inf", "1:1:1x"}) {
    EXPECT_EQ(FindPreset(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(PrecisionTest, ProfileMethodAndOldProfiles) {
  const auto dir = std::filesystem::temp_directory_path() / ("tq_prec3_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  HeadProfile p = Profile(2, 2);
  p.method = "sensitivity";
  p.format = "int8/tq4";
  const std::string path = (dir / "s.json").string();
  ASSERT_TRUE(SaveHeadProfile(p, path).ok());
  auto back = LoadHeadProfile(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->method, "sensitivity");
  EXPECT_EQ(back->format, "int8/tq4");
  // A profile written before methods existed is a concentration profile.
  std::ofstream(dir / "old.json") << R"({"model": "m", "n_layers": 1, "n_kv_heads": 2, "queries": 5,
                                        "score": [[0.5, 0.25]]})";
  auto old = LoadHeadProfile((dir / "old.json").string());
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->method, "concentration");
  EXPECT_EQ(old->format, "");
  EXPECT_EQ(old->score, (std::vector<double>{0.5, 0.25}));
  std::ofstream(dir / "unknown.json")
      << R"({"n_layers": 1, "n_kv_heads": 1, "method": "vibes", "score": [[1]]})";
  EXPECT_EQ(LoadHeadProfile((dir / "unknown.json").string()).status().code(), StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tq::engine
