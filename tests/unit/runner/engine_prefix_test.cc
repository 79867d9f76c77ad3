// The prefix cache serves what a fresh prefill computes. A ~600-token prompt of real text runs fresh on the
// real default model (SmolLM2-135M; skipped where it was not fetched), then again so that its first four pages
// (512 tokens) come from the cache; the top-20 logprobs of the first generated tokens (the first one is the last
// prompt position's) of the cached run are compared with the fresh one's. The fresh run is done alone and in a
// batch with other sequences (its prefill then starts and splits at other positions): the pages the cache
// keeps must not depend on that beyond float rounding; after a restart they come back from disk the same. Pages
// that decode steps wrote (a chat's next turn) are compared with a prefill of the same tokens, within decode's own
// rounding. KV formats: f16 everywhere, and the daemon's default preset (f16 boundary layers, int8/tq4 and tq4
// heads), with and without its cold tier.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "engine/runner/engine.h"
#include "tests/unit/engine/test_paths.h"
#include "tests/unit/runner/engine_test_util.h"
#include "tests/unit/storage/storage_test_util.h"

namespace tq::engine {
namespace {

using testing::Prompt;
using testing::SettledStats;

constexpr int kPromptTokens = 600;  // 4 full pages (512 tokens) cacheable, 88 computed
constexpr int kOutputTokens = 6;

// What one request saw: each generated token with its logprob and the top-20 alternatives.
struct Trace {
  std::vector<GeneratedToken> tokens;
  int cached_tokens = 0;
  FinishReason reason = FinishReason::kNone;
};

// Runs the requests at once (prompts[0] is the one traced; the others only change the batch) and returns the
// trace of prompts[0]. The others are submitted first so that the traced prefill starts after their decodes
// and prefill chunks took part of each step's token budget.
Trace RunTraced(Engine& e, const std::vector<int32_t>& traced, const std::vector<std::vector<int32_t>>& others,
                int max_tokens = kOutputTokens) {
  std::mutex mu;
  std::condition_variable cv;
  Trace trace;
  int done = 0;
  auto submit = [&](std::vector<int32_t> prompt, int n_out, bool trace_it) {
    GenerateRequest r;
    static int next_id = 0;
    r.id = "r" + std::to_string(next_id++);
    r.prompt = std::move(prompt);
    r.max_tokens = n_out;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    r.logprobs = trace_it;
    r.top_logprobs = trace_it ? 20 : 0;
    Status s = e.Submit(std::move(r), [&, trace_it](GenerateEvent&& ev) {
      std::lock_guard<std::mutex> lock(mu);
      if (trace_it) {
        for (GeneratedToken& t : ev.tokens) trace.tokens.push_back(std::move(t));
        if (ev.final) {
          trace.cached_tokens = ev.usage.cached_prompt_tokens;
          trace.reason = ev.finish_reason;
        }
      }
      if (ev.final) {
        ++done;
        cv.notify_all();
      }
    });
    EXPECT_TRUE(s.ok()) << s.ToString();
  };
  for (const auto& o : others) submit(o, 24, false);
  submit(traced, max_tokens, true);
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done == static_cast<int>(others.size()) + 1; });
  lock.unlock();
  SettledStats(e);
  return trace;
}

// Largest |logprob difference| over the tokens of the reference's top-20 list at one output position whose
// logprob is at least `floor` and which the other list holds too; the probability of the reference's top-20 tokens
// that the other list lacks is reported through `missing` (0 when both hold the same tokens).
double MaxLogprobDiff(const GeneratedToken& ref, const GeneratedToken& got, double* missing, double floor = -100) {
  double worst = 0;
  *missing = 0;
  for (const TokenLogprob& a : ref.top) {
    if (a.logprob < floor) continue;
    auto it = std::find_if(got.top.begin(), got.top.end(), [&](const TokenLogprob& b) { return b.token == a.token; });
    if (it == got.top.end()) {
      *missing += std::exp(a.logprob);
      continue;
    }
    worst = std::max(worst, static_cast<double>(std::fabs(a.logprob - it->logprob)));
  }
  return worst;
}

// Real text: WikiText-2's test split from its first article on, cut to `n` tokens.
std::vector<int32_t> TextPrompt(const Engine& e, int n, int skip_chars = 0) {
  std::ifstream in(testing::DataPath("wikitext-2-raw/wiki.test.raw"));
  std::stringstream all;
  all << in.rdbuf();
  std::vector<int32_t> ids = e.tokenizer().Encode(all.str().substr(skip_chars, 16 * n));
  ids.resize(n);
  return ids;
}

struct Config {
  const char* name;
  EngineOptions options;
  bool cold = false;
};

// Pages a prefill made are the same bytes wherever its passes started and ended and whatever shared its steps
// (matrix products are per row; attention per sequence, a query seeing its own page as decode would): the
// logprobs may differ by float rounding of the order of 1e-6 at most. A real fault (a wrong page, a page of
// another layout or position) moves them by more than 1e-2.
constexpr double kPrefillTol = 1e-5;
// Pages that decode steps made, against a prefill of the same tokens: decode's matrix products (batches of at most
// 4 rows) sum in another order than prefill's (kernels/cpu/matmul.h), and the 8-bit activations of the quantized
// weights round differently after that, layer after layer. Measured on SmolLM2 (600 tokens, 150 of them generated):
// up to 0.15 nats on tokens of probability >= 1% and 0.36 nats on the unlikely tail of the top 20, f16 KV and the
// default preset alike (a token-by-token prefill differs from a 512-token one as much), so: tokens with logprob >=
// kDecodeFloor, within kDecodeTol. (A wrong page moves them by a nat or more.)
constexpr double kDecodeTol = 0.3;
constexpr double kDecodeFloor = -4.6;  // probability 1%

enum KvKind { kF16, kDefault, kDefaultCold };

class EnginePrefixTest : public ::testing::TestWithParam<KvKind> {
 protected:
  void SetUp() override { TQ_SKIP_IF_MISSING(testing::SmolLm2Path()); }
  storage::testing::TempDir dir_;
};

class EnginePrefixDiskTest : public EnginePrefixTest {};

EngineOptions Base() {
  EngineOptions o;
  o.model_path = testing::SmolLm2Path();
  o.threads = 2;
  o.ctx_size = 1024;
  return o;
}

Config MakeConfig(KvKind which, const std::string& cold_dir) {
  EngineOptions o = Base();
  switch (which) {
    case kF16:  // f16 everywhere: the cached pages are the fresh run's bytes
      o.kv.k_format = o.kv.v_format = "f16";
      return {"f16", o, false};
    case kDefault:  // the daemon's default preset, RAM tiers only
      o.kv.preset = "default";
      return {"default", o, false};
    case kDefaultCold:  // the daemon's default preset with its cold tier on disk (SPARSE heads' pages written and read back)
      o.kv.preset = "default";
      o.kv_store.cold_dir = cold_dir;
      return {"default+cold", o, true};
  }
  return {};
}

// The logprobs of `got` against `ref` at each output position, over the reference's top-20 tokens with logprob
// >= floor: at most `tol` apart, and the same tokens chosen.
void ExpectClose(const char* what, const Trace& ref, const Trace& got, double tol, double floor = -100) {
  ASSERT_EQ(ref.tokens.size(), static_cast<size_t>(kOutputTokens)) << what;
  ASSERT_EQ(got.tokens.size(), static_cast<size_t>(kOutputTokens)) << what;
  for (int i = 0; i < kOutputTokens; ++i) {
    double missing = 0;
    const double diff = MaxLogprobDiff(ref.tokens[i], got.tokens[i], &missing, floor);
    double all_missing = 0;
    const double all = MaxLogprobDiff(ref.tokens[i], got.tokens[i], &all_missing);
    std::printf("  %-30s pos %d: token %5d vs %5d, logprob %.5f vs %.5f, max |dlogprob| %.2e (p >= %.0e), "
                "%.2e (top 20)\n",
                what, i, ref.tokens[i].id, got.tokens[i].id, ref.tokens[i].logprob, got.tokens[i].logprob, diff,
                std::exp(floor), all);
    EXPECT_EQ(got.tokens[i].id, ref.tokens[i].id) << what << " at output position " << i;
    EXPECT_LE(diff, tol) << what << " at output position " << i;
    EXPECT_LE(missing, 1e-3) << what << " at output position " << i;
    if (got.tokens[i].id != ref.tokens[i].id) break;  // positions after a different token are not comparable
  }
}

// The reference: the prompt fresh and alone, on an engine of the same formats with no cache and no cold tier.
Trace FreshReference(const Config& c, const std::vector<int32_t>& prompt) {
  EngineOptions o = c.options;
  o.prefix_cache_bytes = 0;
  o.kv_store.cold_dir.clear();
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  if (!e.ok()) return {};
  Trace t = RunTraced(**e, prompt, {});
  EXPECT_EQ(t.reason, FinishReason::kLength);
  EXPECT_EQ(t.cached_tokens, 0);
  return t;
}

// A prefill's logprobs do not depend on where its passes end (the step's token budget, or what else shares the
// step). With compressed KV they once did when the first page filled in a pass after the one that began it: its
// queries saw the page through a copy in the transformed domain (k - k_mean) / k_scale, while the earlier pass's
// saw the raw f16 tail, and the rounding of the two differs (0.02 nats on the chosen token, up to 0.3 on the top
// 20 at 600 tokens); the prefix cache then kept whichever the batch made.
TEST_P(EnginePrefixTest, APrefillDoesNotDependOnWhereItsPassesEnd) {
  Trace ref;
  std::vector<int32_t> prompt;
  for (const int budget : {512, 100, 16}) {
    Config c = MakeConfig(GetParam(), "");
    c.options.max_batch_tokens = budget;
    c.options.prefix_cache_bytes = 0;
    auto e = Engine::Create(c.options);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    if (prompt.empty()) prompt = TextPrompt(**e, kPromptTokens);
    const Trace t = RunTraced(**e, prompt, {});
    if (ref.tokens.empty()) {
      ref = t;
    } else {
      ExpectClose(("passes of " + std::to_string(budget)).c_str(), ref, t, kPrefillTol);
    }
  }
}

TEST_P(EnginePrefixTest, FirstRunAloneThenCached) {
  const Config c = MakeConfig(GetParam(), dir_.path());
  auto e = Engine::Create(c.options);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const std::vector<int32_t> prompt = TextPrompt(**e, kPromptTokens);
  const Trace fresh = FreshReference(c, prompt);
  const Trace first = RunTraced(**e, prompt, {});
  const Trace cached = RunTraced(**e, prompt, {});
  EXPECT_EQ(first.cached_tokens, 0);
  EXPECT_EQ(cached.cached_tokens, 512);
  ExpectClose("alone, fresh", fresh, first, kPrefillTol);
  ExpectClose("alone, cached", fresh, cached, kPrefillTol);
}

// The first run in a batch: three other sequences (other text, 50 to 300 tokens, 24 tokens each) were submitted
// before it, so its prefill shares steps with their prefills and decodes and its chunks start at other positions
// (budgets of 512 and 200 tokens a step: chunks cut inside pages). Then the prompt again, alone, from the pages
// that batch made.
TEST_P(EnginePrefixTest, FirstRunInABatchThenCached) {
  for (const int budget : {512, 200}) {
    Config c = MakeConfig(GetParam(), dir_.path() + "/" + std::to_string(budget));
    c.options.max_batch_tokens = budget;
    auto e = Engine::Create(c.options);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    const std::vector<int32_t> prompt = TextPrompt(**e, kPromptTokens);
    const Trace fresh = FreshReference(MakeConfig(GetParam(), ""), prompt);
    const std::vector<std::vector<int32_t>> others = {TextPrompt(**e, 300, 20000), TextPrompt(**e, 50, 40000),
                                                      TextPrompt(**e, 170, 60000)};
    const Trace first = RunTraced(**e, prompt, others);
    const Trace cached = RunTraced(**e, prompt, {});
    EXPECT_EQ(first.cached_tokens, 0);
    EXPECT_EQ(cached.cached_tokens, 512);
    const std::string what = "batched, budget " + std::to_string(budget);
    ExpectClose((what + ", fresh").c_str(), fresh, first, kPrefillTol);
    ExpectClose((what + ", cached").c_str(), fresh, cached, kPrefillTol);
  }
}

// Pages that decode steps made: a 450-token prompt generates 150 tokens; the next request is those 600 tokens (a
// chat's next turn), pages 0-3 from the cache, page 3 partly written by decode steps. Decode and prefill run the
// same math in another order (a 1-row matrix product and attention against a 16-row one), so this is where
// rounding can be frozen into cached pages.
TEST_P(EnginePrefixTest, PagesMadeByDecodeStepsThenCached) {
  const Config c = MakeConfig(GetParam(), dir_.path());
  auto e = Engine::Create(c.options);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  std::vector<int32_t> prompt = TextPrompt(**e, 450);
  const Trace turn = RunTraced(**e, prompt, {}, kPromptTokens - 450);
  ASSERT_EQ(turn.tokens.size(), static_cast<size_t>(kPromptTokens - 450));
  for (const GeneratedToken& t : turn.tokens) prompt.push_back(t.id);
  const Trace fresh = FreshReference(c, prompt);
  const Trace cached = RunTraced(**e, prompt, {});
  EXPECT_EQ(cached.cached_tokens, 512);
  ExpectClose("pages made by decode, cached", fresh, cached, kDecodeTol, kDecodeFloor);
}

// The same with the default preset's cold tier: SPARSE heads' pages are written to disk and read back.
TEST_P(EnginePrefixDiskTest, FirstRunAloneThenCached) {
  const Config c = MakeConfig(GetParam(), dir_.path());
  auto e = Engine::Create(c.options);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const std::vector<int32_t> prompt = TextPrompt(**e, kPromptTokens);
  const Trace fresh = FreshReference(c, prompt);
  const Trace first = RunTraced(**e, prompt, {});
  const Trace cached = RunTraced(**e, prompt, {});
  EXPECT_EQ(cached.cached_tokens, 512);
  ExpectClose("cold tier, fresh", fresh, first, kPrefillTol);
  ExpectClose("cold tier, cached", fresh, cached, kPrefillTol);
}

// After a restart: the pages come back from the cold tier's files (records, transforms) into a new engine.
TEST_P(EnginePrefixDiskTest, CachedAcrossARestart) {
  const Config c = MakeConfig(GetParam(), dir_.path());
  std::vector<int32_t> prompt;
  {
    auto e = Engine::Create(c.options);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    prompt = TextPrompt(**e, kPromptTokens);
    RunTraced(**e, prompt, {});
  }
  const Trace fresh = FreshReference(c, prompt);
  auto e = Engine::Create(c.options);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const Trace cached = RunTraced(**e, prompt, {});
  EXPECT_EQ(cached.cached_tokens, 512);
  ExpectClose("after a restart, cached", fresh, cached, kPrefillTol);
}

std::string KvName(const ::testing::TestParamInfo<KvKind>& p) {
  return p.param == kF16 ? "F16" : p.param == kDefault ? "Default" : "DefaultCold";
}

INSTANTIATE_TEST_SUITE_P(Kv, EnginePrefixTest, ::testing::Values(kF16, kDefault), KvName);
INSTANTIATE_TEST_SUITE_P(Kv, EnginePrefixDiskTest, ::testing::Values(kDefaultCold), KvName);

}  // namespace
}  // namespace tq::engine
