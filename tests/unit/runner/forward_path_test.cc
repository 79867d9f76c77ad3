// The engine's forward paths as the scheduler uses them. The CPU path on the real default model: its KV needs are
// the layout's pages, it fits by the page store's tiers, and it runs the model. The GPU path's host side (what
// tokens need, fitting the pools, one run of tokens per sequence, logits only at a run's end) over a recording
// gpu::Backend, since this machine has no device; on a GPU, gpu_engine_test runs the real one.
#include "engine/runner/forward_path.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "tests/unit/engine/test_paths.h"
#include "tests/unit/runner/engine_test_util.h"
#include "tests/unit/storage/storage_test_util.h"

namespace tq::engine {
namespace {

TEST(CpuPathTest, NeedsTheLayoutsPagesAndRunsTheModel) {
  TQ_SKIP_IF_MISSING(testing::SmolLm2Path());
  auto model = Model::Open(testing::SmolLm2Path());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const HParams& hp = (*model)->hparams();
  auto layout = KvLayout::Create(hp, {"tq4", "tq4", 0});
  ASSERT_TRUE(layout.ok());
  std::shared_ptr<const KvLayout> current = *layout;
  KvStoreOptions tiers;
  // Room for 2 pages per (layer, KV head) in the warm tier (home of every class here) and none elsewhere.
  const std::array<uint32_t, 3> page_bytes = current->class_page_bytes();
  const uint64_t slot = (*std::max_element(page_bytes.begin(), page_bytes.end()) + 63) / 64 * 64;
  tiers.hot_bytes = 0;
  tiers.warm_bytes = 2ull * hp.n_layers * hp.n_kv_heads * slot;
  auto store = KvPageStore::Open(tiers, current->class_page_bytes());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ThreadPool pool(2);
  auto path = MakeCpuPath(**model, pool, current);
  EXPECT_FALSE(path->on_gpu());
  EXPECT_TRUE(path->Supports(true, true).ok());

  const KvNeed two = path->Need(0, 256, 256);
  EXPECT_EQ(two.pages, PagesForTokens(*current, 0, 256, 256));
  EXPECT_EQ(two.pages[0] + two.pages[1] + two.pages[2], 2ull * hp.n_layers * hp.n_kv_heads);
  EXPECT_TRUE((*store)->Fits(two.pages));  // what the engine asks with a path's need
  EXPECT_FALSE((*store)->Fits(path->Need(0, 384, 384).pages));

  SequenceKv kv(current, 64, store->get());
  std::vector<BatchToken> batch = {{1, 0, &kv, false}, {2, 1, &kv, true}};
  PathKv none;
  std::vector<PathKv*> kvs = {&none, &none};
  std::vector<float> logits;
  ASSERT_TRUE(path->Forward(batch, kvs, &logits, nullptr).ok());
  EXPECT_EQ(logits.size(), static_cast<size_t>(hp.vocab_size));
  EXPECT_EQ(none, nullptr) << "the CPU path keeps no KV beside the SequenceKv";
}

// A Backend that records the runs it is given and answers logits [first_pos, n_tokens, ...]. Its page store is a
// real one (RAM tiers standing in for the device and pinned pools): pages of 4 KiB, 3 in the hot tier, 2 in the
// warm one; its pairs: 2 HOT, 1 ACTIVE, 0 SPARSE.
class RecordingBackend final : public gpu::Backend {
 public:
  RecordingBackend() {
    KvStoreOptions tiers;
    tiers.hot_bytes = 3 * 4096;
    tiers.warm_bytes = 2 * 4096;
    tiers.warm_lock = false;
    auto opened = KvPageStore::Open(tiers, {4096, 4096, 0});
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    if (opened.ok()) store_ = std::move(*opened);
  }

  struct Kv final : gpu::BackendKv {
    int tokens = 0;
    uint64_t bytes() const override { return 4096; }
  };
  struct Run {
    const Kv* kv;
    std::vector<int32_t> tokens;
    int first_pos;
    bool want_logits;
  };

  StatusOr<std::unique_ptr<gpu::BackendKv>> NewKv() override {
    ++made;
    return std::unique_ptr<gpu::BackendKv>(new Kv());
  }
  Status Forward(gpu::BackendKv& kv, std::span<const int32_t> tokens, int first_pos, bool want_logits,
                 std::vector<float>* logits) override {
    auto& k = static_cast<Kv&>(kv);
    if (first_pos != k.tokens) return InvalidArgumentError("out of order");
    k.tokens += static_cast<int>(tokens.size());
    runs.push_back({&k, {tokens.begin(), tokens.end()}, first_pos, want_logits});
    if (want_logits) *logits = {static_cast<float>(first_pos), static_cast<float>(tokens.size()), 0, 0};
    return Status::Ok();
  }
  std::shared_ptr<KvPageStore> store() const override { return store_; }
  std::array<uint64_t, 3> class_pairs() const override { return {2, 1, 0}; }
  std::string Describe() const override { return "recording backend"; }

  int made = 0;
  std::vector<Run> runs;

 private:
  std::shared_ptr<KvPageStore> store_;
};

TEST(GpuPathTest, HostSideNeedsAndRunsOneSequenceAtATime) {
  auto owned = std::make_unique<RecordingBackend>();
  RecordingBackend* backend = owned.get();
  auto path = MakeGpuPath(std::move(owned));
  EXPECT_TRUE(path->on_gpu());
  EXPECT_EQ(path->Supports(true, false).code(), StatusCode::kUnimplemented);
  EXPECT_EQ(path->Supports(false, true).code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(path->Supports(false, false).ok());

  // A page of its class per (layer, KV head) each time 128 tokens fill, whatever the pass length.
  EXPECT_EQ(path->Need(0, 127, 512).pages, (std::array<uint64_t, 3>{0, 0, 0}));
  EXPECT_EQ(path->Need(100, 30, 512).pages, (std::array<uint64_t, 3>{2, 1, 0}));
  EXPECT_EQ(path->Need(0, 256, 1).pages, (std::array<uint64_t, 3>{4, 2, 0}));
  // The engine asks the backend's store: 5 slots, HOT's home the hot tier (3) falling back to warm, ACTIVE's
  // warm (2).
  const std::shared_ptr<KvPageStore> store = backend->store();
  EXPECT_TRUE(store->Fits(path->Need(0, 128, 128).pages));
  EXPECT_TRUE(store->Fits({3, 2, 0}));
  EXPECT_FALSE(store->Fits(path->Need(0, 256, 256).pages));  // 4 HOT + 2 ACTIVE pages in 5 slots
  // Pages taken in the store count: with the hot tier full, one page pair no longer fits.
  std::vector<PageId> held;
  for (int i = 0; i < 3; ++i) {
    auto a = store->Allocate(PrecisionClass::kHot, 4096, {});
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    held.push_back(a->id);
  }
  EXPECT_FALSE(store->Fits(path->Need(0, 128, 128).pages));  // 2 HOT + 1 ACTIVE in 2 warm slots
  for (PageId id : held) store->Release(id);
  EXPECT_TRUE(store->Fits(path->Need(0, 128, 128).pages));

  // Two sequences' tokens in one batch: a (3 prompt tokens, logits at the last), b (one decode token).
  PathKv a, b;
  std::vector<BatchToken> batch = {{10, 0}, {11, 1}, {12, 2, nullptr, true}, {20, 0, nullptr, true}};
  std::vector<PathKv*> kvs = {&a, &a, &a, &b};
  std::vector<float> logits;
  ASSERT_TRUE(path->Forward(batch, kvs, &logits, nullptr).ok());
  EXPECT_EQ(backend->made, 2);
  ASSERT_EQ(backend->runs.size(), 2u);
  EXPECT_EQ(backend->runs[0].tokens, (std::vector<int32_t>{10, 11, 12}));
  EXPECT_TRUE(backend->runs[0].want_logits);
  EXPECT_EQ(backend->runs[1].tokens, (std::vector<int32_t>{20}));
  EXPECT_EQ(logits, (std::vector<float>{0, 3, 0, 0, 0, 1, 0, 0}));
  // The next step reuses each sequence's KV.
  batch = {{13, 3, nullptr, true}};
  kvs = {&a};
  ASSERT_TRUE(path->Forward(batch, kvs, &logits, nullptr).ok());
  EXPECT_EQ(backend->made, 2);
  EXPECT_EQ(logits, (std::vector<float>{3, 1, 0, 0}));
  // Logits in the middle of a sequence's run cannot come from one GPU call.
  batch = {{14, 4, nullptr, true}, {15, 5, nullptr, true}};
  kvs = {&a, &a};
  EXPECT_EQ(path->Forward(batch, kvs, &logits, nullptr).code(), StatusCode::kInternal);

}

}  // namespace
}  // namespace tq::engine
