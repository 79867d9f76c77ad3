// The GPU forward pass (engine/gpu) against the CPU pass, across KV formats and tiers, and the page pools.
// Needs a GPU (skipped otherwise) and, for the model tests, SmolLM2-135M ($TQ_MODEL or the tqserve model cache).
#include "engine/gpu/gpu_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "engine/gpu/slab_page_tier.h"
#include "engine/kv/kv_cache.h"
#include "engine/llm/model.h"
#include "engine/llm/thread_pool.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/unit/storage/storage_test_util.h"

namespace tq::gpu {
namespace {

std::string ModelPath() {
  if (const char* env = std::getenv("TQ_MODEL")) return env;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/tqserve/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// Empty when there is a GPU, else the reason.
std::string NoGpuReason() {
  auto dev = ProbeDevice();
  return dev.ok() ? std::string() : dev.status().ToString();
}

#define TQ_SKIP_WITHOUT_GPU()                                           \
  do {                                                                  \
    const std::string reason = NoGpuReason();                           \
    if (!reason.empty()) GTEST_SKIP() << "no GPU: " << reason;          \
  } while (0)

int ArgMax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

double Cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += double{a[i]} * b[i];
    aa += double{a[i]} * a[i];
    bb += double{b[i]} * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

class GpuModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!NoGpuReason().empty() || !std::filesystem::exists(ModelPath())) return;
    auto m = engine::Model::Open(ModelPath());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    cpu_ = std::move(m).value().release();
  }
  static void TearDownTestSuite() {
    delete cpu_;
    cpu_ = nullptr;
  }

  void SetUp() override {
    TQ_SKIP_WITHOUT_GPU();
    if (cpu_ == nullptr) GTEST_SKIP() << ModelPath() << " is absent (set TQ_MODEL)";
  }

  static std::unique_ptr<GpuModel> MakeGpu(const std::string& k, const std::string& v, double warm = 0.0,
                                           double cold = 0.0, const std::string& cold_dir = "") {
    GpuModelOptions o;
    o.k_format = k;
    o.v_format = v;
    o.max_tokens = 1024;
    o.warm_heads_fraction = warm;
    o.cold_heads_fraction = cold;
    o.cold.cold_dir = cold_dir;
    o.cold.capacity_bytes = uint64_t{256} << 20;
    auto m = GpuModel::Create(*cpu_, o);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? std::move(m).value() : nullptr;
  }

  // A prompt of about n tokens of real text (a paragraph repeated).
  static std::vector<int32_t> TextPrompt(size_t n) {
    auto tok = engine::Tokenizer::FromGguf(cpu_->gguf());
    EXPECT_TRUE(tok.ok()) << tok.status().ToString();
    std::string text;
    std::vector<int32_t> ids;
    while (tok.ok() && ids.size() < n) {
      text += "The quick brown fox jumps over the lazy dog. A paged KV cache keeps the keys and values of every "
              "token in fixed pages of 128 tokens, and attention reads them straight from the pages. ";
      const size_t before = ids.size();
      ids = (*tok)->Encode(text);
      if (ids.size() <= before) break;  // a vocabulary that cannot spell the text (a synthetic model's)
    }
    if (ids.size() < n) {  // token ids spread over the vocabulary instead
      ids.clear();
      const int vocab = cpu_->hparams().vocab_size;
      for (size_t i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>((i * 7919 + 11) % vocab));
    }
    ids.resize(n);
    return ids;
  }

  static engine::Model* cpu_;
};

engine::Model* GpuModelTest::cpu_ = nullptr;

// (a) The GPU pass with f16 KV against the CPU pass with f16 KV; a batched prefill against token by token.
TEST_F(GpuModelTest, PrefillLogitsMatchCpuAndTokenByToken) {
  std::vector<int32_t> tokens;
  for (int32_t t = 1; t <= 40; ++t) tokens.push_back(t);

  // CPU reference: f16 pages (positions past the first page stay in the sequence's f16 tail here).
  const engine::HParams& hp = cpu_->hparams();
  auto layout = engine::KvLayout::Create(hp, {"f16", "f16", 0});
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  auto store = engine::KvPageStore::Open({}, (*layout)->class_page_bytes());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  engine::SequenceKv kv(*layout, 256, store->get());
  std::vector<engine::BatchToken> batch;
  for (size_t i = 0; i < tokens.size(); ++i) {
    batch.push_back({tokens[i], static_cast<int>(i), &kv, i + 1 == tokens.size()});
  }
  engine::ThreadPool pool(2);
  std::vector<float> cpu_logits;
  ASSERT_TRUE(cpu_->Forward(batch, pool, &cpu_logits).ok());
  ASSERT_EQ(cpu_logits.size(), static_cast<size_t>(hp.vocab_size));

  auto gpu = MakeGpu("f16", "f16");
  ASSERT_NE(gpu, nullptr);
  auto seq = gpu->NewSequence();
  ASSERT_TRUE(seq.ok()) << seq.status().ToString();
  std::vector<float> gpu_logits;
  Status s = gpu->Forward(**seq, tokens, 0, true, &gpu_logits);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(gpu_logits.size(), cpu_logits.size());
  EXPECT_EQ((*seq)->n_tokens(), 40);
  EXPECT_EQ(ArgMax(gpu_logits), ArgMax(cpu_logits));
  EXPECT_GT(Cosine(gpu_logits, cpu_logits), 0.999);

  auto one = gpu->NewSequence();
  ASSERT_TRUE(one.ok());
  std::vector<float> step_logits;
  for (size_t i = 0; i < tokens.size(); ++i) {
    s = gpu->Forward(**one, {&tokens[i], 1}, static_cast<int>(i), i + 1 == tokens.size(), &step_logits);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  EXPECT_EQ(ArgMax(step_logits), ArgMax(gpu_logits));
  EXPECT_GT(Cosine(step_logits, gpu_logits), 0.99999);
  EXPECT_LT(MaxAbsDiff(step_logits, gpu_logits), 1e-2f);
}

// Greedy tokens of `gpu` after `prompt`, teacher-forced with `forced` when given (else its own argmax).
std::vector<int> Greedy(GpuModel& gpu, const std::vector<int32_t>& prompt, int steps,
                        const std::vector<int>* forced, std::vector<std::vector<float>>* all_logits = nullptr) {
  auto seq = gpu.NewSequence();
  EXPECT_TRUE(seq.ok());
  if (!seq.ok()) return {};
  std::vector<float> logits;
  Status s = gpu.Forward(**seq, prompt, 0, true, &logits);
  EXPECT_TRUE(s.ok()) << s.ToString();
  std::vector<int> out;
  for (int i = 0; s.ok() && i < steps; ++i) {
    out.push_back(ArgMax(logits));
    if (all_logits) all_logits->push_back(logits);
    const int32_t next = forced ? (*forced)[i] : out.back();
    s = gpu.Forward(**seq, {&next, 1}, (*seq)->n_tokens(), true, &logits);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  return out;
}

// (b) Past a page boundary (300 tokens: two full pages and a tail) tq4 KV follows f16 KV's greedy tokens.
TEST_F(GpuModelTest, Tq4FollowsF16PastPageBoundaries) {
  const std::vector<int32_t> prompt = TextPrompt(300);
  ASSERT_EQ(prompt.size(), 300u);
  auto f16 = MakeGpu("f16", "f16");
  auto tq4 = MakeGpu("tq4", "tq4");
  ASSERT_NE(f16, nullptr);
  ASSERT_NE(tq4, nullptr);
  const std::vector<int> ref = Greedy(*f16, prompt, 16, nullptr);
  ASSERT_EQ(ref.size(), 16u);
  const std::vector<int> got = Greedy(*tq4, prompt, 16, &ref);
  ASSERT_EQ(got.size(), 16u);
  int same = 0;
  for (int i = 0; i < 16; ++i) same += got[i] == ref[i];
  EXPECT_GE(same, 15) << "tq4 matched " << same << " of 16 greedy tokens";

  // The pages and the tail: 316 tokens ran, so 2 full pages per (layer, KV head) were encoded.
  const engine::HParams& hp = cpu_->hparams();
  EXPECT_EQ(f16->store().Stats().tiers[0].pages, 0u);  // the sequences are gone
  EXPECT_EQ(f16->store().Stats().tiers[0].slots_used + f16->store().Stats().tiers[1].slots_used, 0u);
  EXPECT_GT(f16->kv_bytes_per_token(), tq4->kv_bytes_per_token() * 3);
  auto codec = kernels::KvCodec::Create(kernels::KvFormat::kF16, hp.head_dim);
  ASSERT_TRUE(codec.ok());
  EXPECT_DOUBLE_EQ(f16->kv_bytes_per_token(),
                   hp.n_layers * hp.n_kv_heads * 2.0 * (*codec)->layout().page_bytes / kernels::kPageTokens);
}

// (c) The pools: allocate to the budget, ResourceExhausted, free, reuse; a staged copy of pinned pages.
TEST(GpuPoolTest, AllocateToBudgetFreeReuseAndStage) {
  TQ_SKIP_WITHOUT_GPU();
  for (std::shared_ptr<SlabMemory> memory : {DeviceMemory(), PinnedHostMemory()}) {
    SlabPool pool(memory, 8 * 4096);
    ASSERT_TRUE(pool.AddSlab(4000, 8).ok());  // stride 4096
    EXPECT_EQ(pool.AddSlab(4096, 1).code(), StatusCode::kAlreadyExists);
    EXPECT_EQ(pool.AddSlab(512, 1).code(), StatusCode::kResourceExhausted);  // the budget is spent
    EXPECT_EQ(pool.capacity_bytes(), 8u * 4096);
    std::set<uint8_t*> slots;
    for (int i = 0; i < 8; ++i) {
      auto p = pool.Allocate(4000);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % kSlotAlign, 0u);
      slots.insert(*p);
    }
    EXPECT_EQ(slots.size(), 8u);
    EXPECT_EQ(pool.used_bytes(), 8u * 4096);
    EXPECT_EQ(pool.Allocate(4000).status().code(), StatusCode::kResourceExhausted);
    EXPECT_EQ(pool.Allocate(100).status().code(), StatusCode::kNotFound);
    uint8_t* freed = *std::next(slots.begin(), 3);
    pool.Free(freed);
    EXPECT_EQ(pool.used_slots(), 7);
    auto again = pool.Allocate(4096);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, freed);
  }

  auto tier = WarmTier::Create(3 * 4096);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  SlabPool pinned(PinnedHostMemory(), 4 * 4096);
  ASSERT_TRUE(pinned.AddSlab(4096, 4).ok());
  std::vector<uint8_t*> host;
  for (int i = 0; i < 4; ++i) host.push_back(*pinned.Allocate(4096));
  for (int i = 0; i < 4; ++i) std::memset(host[i], 10 + i, 4096);
  auto compute = Stream::Create();
  ASSERT_TRUE(compute.ok());
  ASSERT_TRUE(tier->BeginPass(compute->get()).ok());
  // Slots 0, 1 (adjacent: one copy) and 3.
  std::vector<StagedPage> pages = {{host[0], nullptr}, {host[1], nullptr}, {host[3], nullptr}};
  ASSERT_TRUE(tier->StageAsync(1, pages, 4096).ok());
  std::vector<StagedPage> too_many(4, StagedPage{host[0], nullptr});
  EXPECT_EQ(tier->StageAsync(0, too_many, 4096).code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(tier->WaitStaged(1, compute->get()).ok());
  std::vector<uint8_t> back(4096);
  const int expect[3] = {10, 11, 13};
  for (int i = 0; i < 3; ++i) {
    ASSERT_NE(pages[i].device, nullptr);
    ASSERT_EQ(cudaMemcpyAsync(back.data(), pages[i].device, 4096, cudaMemcpyDeviceToHost, compute->get()),
              cudaSuccess);
    ASSERT_TRUE(compute->Synchronize().ok());
    EXPECT_EQ(back[0], expect[i]);
    EXPECT_EQ(back[4095], expect[i]);
  }
  ASSERT_TRUE(tier->Release(1, compute->get()).ok());
}

// (c2) The device and pinned pools as page-store tiers: a page written from host bytes lies at its address in
// device (or pinned) memory and pins back byte for byte (device pages through a copy); a freed slot is reused.
TEST(GpuPoolTest, SlabTiersOnDeviceAndPinnedMemoryRoundTrip) {
  TQ_SKIP_WITHOUT_GPU();
  for (std::shared_ptr<SlabMemory> memory : {DeviceMemory(), PinnedHostMemory()}) {
    const bool device = memory->name() == "device";
    auto tier = SlabPageTier::Open(device ? engine::KvTier::kHot : engine::KvTier::kWarm, memory, 2 * 8192, 8000);
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    std::vector<uint8_t> bytes(8000);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 3);
    auto in_place = (*tier)->Write(engine::PageId{1}, bytes, engine::PrecisionClass::kHot, {});
    ASSERT_TRUE(in_place.ok()) << in_place.status().ToString();
    EXPECT_EQ(*in_place == nullptr, device) << "pinned pages are read in place, device pages are not";
    const engine::PageTier::PinRef ref{engine::PageId{1}, 8000, 8000};
    engine::PinnedPage pin;
    ASSERT_TRUE((*tier)->Pin(std::span(&ref, 1), std::span(&pin, 1)).ok());
    EXPECT_EQ(std::vector<uint8_t>(pin.data, pin.data + 8000), bytes);
    std::vector<uint8_t> back(8000);
    ASSERT_TRUE(memory->CopyOut(back.data(), (*tier)->Address(engine::PageId{1}), 8000).ok());
    EXPECT_EQ(back, bytes);
    ASSERT_TRUE((*tier)->Write(engine::PageId{2}, bytes, engine::PrecisionClass::kHot, {}).ok());
    EXPECT_EQ((*tier)->Write(engine::PageId{3}, bytes, engine::PrecisionClass::kHot, {}).status().code(),
              StatusCode::kResourceExhausted);
    (*tier)->Free(engine::PageId{1});
    EXPECT_TRUE((*tier)->Write(engine::PageId{3}, bytes, engine::PrecisionClass::kHot, {}).ok());
  }
}

// (d) Warm heads (pinned host pages staged per layer) give the logits of hot heads.
TEST_F(GpuModelTest, WarmHeadsMatchHotHeads) {
  const std::vector<int32_t> prompt = TextPrompt(300);
  auto hot = MakeGpu("tq4", "int8", 0.0);
  auto half = MakeGpu("tq4", "int8", 0.5);
  auto all = MakeGpu("tq4", "int8", 1.0);
  ASSERT_TRUE(hot && half && all);
  ASSERT_NE(half->warm(), nullptr);
  EXPECT_EQ(hot->warm(), nullptr);
  EXPECT_LT(half->hot_kv_bytes_per_token(), half->kv_bytes_per_token());
  EXPECT_EQ(all->hot_kv_bytes_per_token(), 0.0);
  std::vector<std::vector<float>> lh, lw, la;
  const std::vector<int> ref = Greedy(*hot, prompt, 4, nullptr, &lh);
  Greedy(*half, prompt, 4, &ref, &lw);
  Greedy(*all, prompt, 4, &ref, &la);
  ASSERT_EQ(lh.size(), 4u);
  ASSERT_EQ(lw.size(), 4u);
  ASSERT_EQ(la.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_LE(MaxAbsDiff(lw[i], lh[i]), 1e-5f) << "step " << i;
    EXPECT_LE(MaxAbsDiff(la[i], lh[i]), 1e-5f) << "step " << i;
  }
}

// (e) Cold heads (pages on disk, read into pinned buffers per layer, then staged) give the logits of hot
// heads, beside warm ones; their pages leave the disk with the sequence.
TEST_F(GpuModelTest, ColdHeadsMatchHotHeads) {
  storage::testing::TempDir dir;
  const std::vector<int32_t> prompt = TextPrompt(300);
  auto hot = MakeGpu("tq4", "int8");
  auto mixed = MakeGpu("tq4", "int8", 0.25, 0.5, dir.path() + "/mixed");
  auto all = MakeGpu("tq4", "int8", 0.0, 1.0, dir.path() + "/all");
  ASSERT_TRUE(hot && mixed && all);
  ASSERT_TRUE(mixed->store().has_cold_tier());
  EXPECT_FALSE(hot->store().has_cold_tier());
  EXPECT_EQ(all->hot_kv_bytes_per_token(), 0.0);
  int cold = 0, warm = 0;
  for (int l = 0; l < mixed->hparams().n_layers; ++l) {
    for (int h = 0; h < mixed->hparams().n_kv_heads; ++h) {
      cold += mixed->is_cold(l, h);
      warm += mixed->is_warm(l, h);
      EXPECT_FALSE(mixed->is_cold(l, h) && mixed->is_warm(l, h));
    }
  }
  EXPECT_GT(cold, 0);
  EXPECT_GT(warm, 0);
  std::vector<std::vector<float>> lh, lm, la;
  const std::vector<int> ref = Greedy(*hot, prompt, 4, nullptr, &lh);
  Greedy(*mixed, prompt, 4, &ref, &lm);
  Greedy(*all, prompt, 4, &ref, &la);
  ASSERT_EQ(lm.size(), 4u);
  ASSERT_EQ(la.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_LE(MaxAbsDiff(lm[i], lh[i]), 1e-5f) << "step " << i;
    EXPECT_LE(MaxAbsDiff(la[i], lh[i]), 1e-5f) << "step " << i;
  }
  EXPECT_EQ(all->store().Stats().tiers[2].pages, 0u);  // Greedy's sequence is gone
  // A synthetic context on disk decodes, and its pages count against the cold store.
  auto seq = all->NewSequence();
  ASSERT_TRUE(seq.ok());
  ASSERT_TRUE(all->FillSynthetic(**seq, 700, 3).ok());
  EXPECT_EQ(all->store().Stats().tiers[2].pages, 5u * all->hparams().n_layers * all->hparams().n_kv_heads);
  std::vector<float> logits;
  const int32_t t = 5;
  Status s = all->Forward(**seq, {&t, 1}, (*seq)->n_tokens(), true, &logits);
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

// FillSynthetic: a long synthetic context decodes to finite logits, and the pool holds its pages.
TEST_F(GpuModelTest, SyntheticContextDecodes) {
  auto gpu = MakeGpu("int8", "int8", 0.5);
  ASSERT_NE(gpu, nullptr);
  auto seq = gpu->NewSequence();
  ASSERT_TRUE(seq.ok());
  Status s = gpu->FillSynthetic(**seq, 1000, 7);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ((*seq)->n_tokens(), 1000);
  EXPECT_EQ((*seq)->full_pages(), 7);
  // Half the pairs' pages in the device pool, half in the pinned pool, every one a page of the shared store.
  const engine::KvStoreStats st = gpu->store().Stats();
  const uint64_t pairs = uint64_t(gpu->hparams().n_layers) * gpu->hparams().n_kv_heads;
  EXPECT_EQ(st.tiers[0].pages + st.tiers[1].pages, 7 * pairs);
  EXPECT_GT(st.tiers[0].pages, 0u);
  EXPECT_GT(st.tiers[1].pages, 0u);
  std::vector<float> logits;
  for (int i = 0; i < 3; ++i) {
    const int32_t t = 1 + i;
    s = gpu->Forward(**seq, {&t, 1}, (*seq)->n_tokens(), true, &logits);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(gpu->FillSynthetic(**seq, 10, 1).code(), StatusCode::kFailedPrecondition);
  seq->reset();
  EXPECT_EQ(gpu->store().Stats().tiers[0].pages + gpu->store().Stats().tiers[1].pages, 0u);
}

}  // namespace
}  // namespace tq::gpu
