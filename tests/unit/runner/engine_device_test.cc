// The engine's device choice: the GPU path's KV layout check (one K and one V format everywhere) and the
// errors an engine gives where the GPU path cannot run (no CUDA in the build, no device, an unknown device
// name), on the real default model (skipped where it was not fetched). Where a GPU is there, the same options
// must create an engine that generates (tests/unit/gpu_model/gpu_engine_test.cc checks its tokens).
#include <gtest/gtest.h>

#include "engine/gpu/backend.h"
#include "engine/runner/engine.h"
#include "tests/unit/engine/test_paths.h"
#include "tests/unit/runner/engine_test_util.h"
#include "tests/unit/storage/storage_test_util.h"

namespace tq::engine {
namespace {

EngineOptions Options() {
  EngineOptions o;
  o.model_path = testing::SmolLm2Path();
  o.threads = 2;
  o.ctx_size = 512;
  return o;
}

StatusOr<std::shared_ptr<const KvLayout>> Layout(const KvSpec& spec) {
  auto model = Model::Open(testing::SmolLm2Path());
  if (!model.ok()) return model.status();
  return KvLayout::Create((*model)->hparams(), spec);
}

TEST(GpuUniformFormatsTest, OneFormatPairEverywhereIsTaken) {
  TQ_SKIP_IF_MISSING(testing::SmolLm2Path());
  for (const auto& [spec, k, v] : std::vector<std::tuple<KvSpec, std::string, std::string>>{
           {KvSpec{.preset = "uniform:tq4"}, "tq4", "tq4"},
           {KvSpec{.k_format = "tq3", .v_format = "int8"}, "tq3", "int8"},
           {KvSpec{}, "f16", "f16"}}) {
    auto layout = Layout(spec);
    ASSERT_TRUE(layout.ok()) << layout.status().ToString();
    auto formats = gpu::UniformFormats(**layout);
    ASSERT_TRUE(formats.ok()) << formats.status().ToString();
    EXPECT_EQ(formats->first, k);
    EXPECT_EQ(formats->second, v);
  }
}

TEST(GpuUniformFormatsTest, MixedLayoutsAndPlainRowsAreRefusedWithTheReason) {
  TQ_SKIP_IF_MISSING(testing::SmolLm2Path());
  auto boundary = Layout(KvSpec{.k_format = "tq4", .v_format = "tq4", .boundary_layers = 2});
  ASSERT_TRUE(boundary.ok()) << boundary.status().ToString();
  auto s = gpu::UniformFormats(**boundary);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("layer 2 head 0 differs"), std::string::npos) << s.status().ToString();
  EXPECT_NE(s.status().message().find("one K and one V format"), std::string::npos);

  auto plain = Layout(KvSpec{.k_format = "f32", .v_format = "f32"});
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  s = gpu::UniformFormats(**plain);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("plain f32"), std::string::npos) << s.status().ToString();
}

TEST(EngineDeviceTest, UnknownDeviceIsAnError) {
  TQ_SKIP_IF_MISSING(testing::SmolLm2Path());
  EngineOptions o = Options();
  o.device = "tpu";
  auto e = Engine::Create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("'tpu'"), std::string::npos) << e.status().ToString();
}

TEST(EngineDeviceTest, CudaWithAMixedLayoutNamesTheLayout) {
  TQ_SKIP_IF_MISSING(testing::SmolLm2Path());
  EngineOptions o = Options();
  o.device = "cuda";
  o.kv = KvSpec{.k_format = "tq4", .v_format = "tq4", .boundary_layers = 1};
  auto e = Engine::Create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument) << e.status().ToString();
  EXPECT_NE(e.status().message().find("f16 in layers"), std::string::npos) << e.status().ToString();
}

TEST(EngineDeviceTest, CudaRunsOrSaysWhyNot) {
  TQ_SKIP_IF_MISSING(testing::SmolLm2Path());
  EngineOptions o = Options();
  o.device = "cuda";
  o.kv.preset = "uniform:tq4";
  o.gpu_warm_fraction = 1.5;
  auto bad = Engine::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status().ToString();
  o.gpu_warm_fraction = 0.25;
  o.gpu_cold_fraction = 0.25;  // without a cold directory
  auto no_dir = Engine::Create(o);
  ASSERT_FALSE(no_dir.ok());
  EXPECT_EQ(no_dir.status().code(), StatusCode::kInvalidArgument) << no_dir.status().ToString();
  EXPECT_NE(no_dir.status().message().find("cold directory"), std::string::npos)
      << no_dir.status().ToString();
  storage::testing::TempDir dir;
  o.kv_store.cold_dir = dir.path();
  auto e = Engine::Create(o);
  if (!e.ok()) {
    // No CUDA in the build, or no driver or device: Unavailable, saying which.
    EXPECT_EQ(e.status().code(), StatusCode::kUnavailable) << e.status().ToString();
    EXPECT_NE(e.status().message().find("CUDA"), std::string::npos) << e.status().ToString();
    return;
  }
  ASSERT_TRUE((*e)->on_gpu());
  auto [out, stats] = testing::RunOn(**e, {{200, 8}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].reason, FinishReason::kLength) << out[0].error.ToString();
  EXPECT_EQ(out[0].tokens.size(), 8u);
  // The engine's store is the GPU's: a device pool, and the finished sequence gave its pages back.
  EXPECT_GT(stats.kv_store.tiers[0].capacity_bytes, 0u);
  EXPECT_EQ(stats.kv_store.tiers[0].pages + stats.kv_store.tiers[1].pages + stats.kv_store.tiers[2].pages, 0u);
}

}  // namespace
}  // namespace tq::engine
