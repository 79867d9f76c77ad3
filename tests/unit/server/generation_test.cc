// The one admission path (server/generation.h) on a real engine (stories260K): limits, draining, the
// concurrency limit, deadlines, a departed client, a failed Submit, and the outcome metrics. An engine error
// cannot be produced on demand by the real engine, so that one case uses a small fake that fails its requests.
#include "server/generation.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "../engine/test_paths.h"
#include "engine/api.h"

namespace tq::server {
namespace {

using engine::testing::Stories260KPath;

// Records what a front end would send; can pretend the client left.
class RecordingStream final : public GenerationStream {
 public:
  bool ClientGone() override { return gone_after_events >= 0 && events >= gone_after_events; }
  bool OnEvent(int choice, const engine::GenerateEvent& ev, bool timed_out) override {
    ++events;
    texts.resize(std::max<size_t>(texts.size(), choice + 1));
    texts[choice] += ev.text;
    if (ev.final && timed_out) ++timed_out_finals;
    return fail_writes_after < 0 || events < fail_writes_after;
  }
  int events = 0;
  int timed_out_finals = 0;
  int gone_after_events = -1;   // ClientGone() true once this many events arrived; -1 = never
  int fail_writes_after = -1;   // OnEvent fails from this event on; -1 = never
  std::vector<std::string> texts;
};

class GenerationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TQ_SKIP_IF_MISSING(Stories260KPath());
    engine::EngineOptions o;
    o.model_path = Stories260KPath();
    o.threads = 2;
    o.ctx_size = 1024;  // long enough that a 1000-token request outlives the 100 ms client polls
    o.prefix_cache_bytes = 0;
    o.kv.preset = "";  // stories260K (head_dim 8): plain f32 rows
    o.kv_store.cold_dir.clear();
    auto e = engine::CreateEngine(o);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(e).value();
    metrics_ = std::make_unique<Metrics>(1 << 20);
  }

  Generation Make(RequestLimits limits = {}) { return Generation(limits, engine_.get(), metrics_.get(), &state_); }

  engine::GenerateRequest Request(const std::string& id, int max_tokens) {
    engine::GenerateRequest r;
    r.id = id;
    r.prompt = engine_->Tokenize("Once upon a time", {});
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    return r;
  }

  // The count of tqserve_requests_total for one endpoint and outcome, from a scrape.
  double Count(const std::string& endpoint, const std::string& outcome) {
    const std::string text = metrics_->Scrape(engine_->Stats());
    const std::string key = "tqserve_requests_total{endpoint=\"" + endpoint + "\",outcome=\"" + outcome + "\"} ";
    const size_t at = text.find(key);
    return at == std::string::npos ? 0 : std::stod(text.substr(at + key.size()));
  }

  // Waits until the engine holds no request (aborts take effect within a step).
  void ExpectEngineIdle() {
    for (int i = 0; i < 400; ++i) {
      const engine::EngineStats s = engine_->Stats();
      if (s.running == 0 && s.waiting == 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ADD_FAILURE() << "the engine still runs requests";
  }

  std::unique_ptr<engine::EngineApi> engine_;
  std::unique_ptr<Metrics> metrics_;
  ServerState state_;
};

TEST_F(GenerationTest, RunsChoicesToTheEndAndCountsSuccess) {
  Generation g = Make();
  RecordingStream stream;
  std::vector<engine::GenerateRequest> choices{Request("a-0", 8), Request("a-1", 8)};
  auto run = g.Run("test", std::move(choices), RequestDeadline(0), stream);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(run->outcome, Outcome::kSuccess);
  ASSERT_EQ(run->finals.size(), 2u);
  for (const engine::GenerateEvent& f : run->finals) {
    EXPECT_EQ(f.finish_reason, engine::FinishReason::kLength);
    EXPECT_EQ(f.usage.completion_tokens, 8);
  }
  EXPECT_EQ(stream.texts.size(), 2u);
  EXPECT_EQ(stream.texts[0], stream.texts[1]);  // greedy: both choices alike
  EXPECT_EQ(Count("test", "success"), 1);
  EXPECT_EQ(state_.in_flight, 0);
}

TEST_F(GenerationTest, LimitsAreOneSetForEveryFrontEnd) {
  RequestLimits limits;
  limits.max_prompt_tokens = 3;
  limits.max_tokens = 10;
  Generation g = Make(limits);
  const auto field_of = [&](engine::GenerateRequest r) {
    auto e = g.Check(r);
    return e ? e->field : std::string("ok");
  };
  EXPECT_EQ(field_of(Request("x", 4)), "prompt");  // "Once upon a time" is more than 3 tokens
  limits.max_prompt_tokens = 0;
  Generation h = Make(limits);
  const auto check = [&](engine::GenerateRequest r) {
    auto e = h.Check(r);
    return e ? e->field : std::string("ok");
  };
  EXPECT_EQ(check(Request("x", 10)), "ok");
  EXPECT_EQ(check(Request("x", 11)), "max_tokens");
  EXPECT_EQ(check(Request("x", 0)), "max_tokens");  // 0 = to the end of the context, past the cap
  engine::GenerateRequest r = Request("x", 4);
  r.prompt.clear();
  EXPECT_EQ(check(r), "prompt");
  r = Request("x", 4);
  r.stop = {"a", "b", "c", "d", "e"};
  EXPECT_EQ(check(r), "stop");
  r.stop = {std::string(257, 'x')};
  EXPECT_EQ(check(r), "stop");
  r.stop = {""};
  EXPECT_EQ(check(r), "stop");
  r.stop = {"ok"};
  r.stop_tokens.assign(17, 1);
  EXPECT_EQ(check(r), "stop_token_ids");
  r.stop_tokens = {-1};
  EXPECT_EQ(check(r), "stop_token_ids");
  r.stop_tokens = {engine_->Info().vocab_size};
  EXPECT_EQ(check(r), "stop_token_ids");

  // Run refuses before anything reaches the engine, naming the field, and counts it invalid.
  RecordingStream stream;
  std::string field;
  std::vector<engine::GenerateRequest> choices{Request("y", 11)};
  auto run = h.Run("test", std::move(choices), RequestDeadline(0), stream, &field);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(field, "max_tokens");
  EXPECT_EQ(stream.events, 0);
  EXPECT_EQ(Count("test", "invalid"), 1);
}

TEST_F(GenerationTest, DrainingAndTheConcurrencyLimitReject) {
  RequestLimits limits;
  limits.max_concurrent_requests = 1;
  Generation g = Make(limits);
  RecordingStream stream;
  state_.in_flight = 1;  // another front end's request holds the only slot
  std::vector<engine::GenerateRequest> one{Request("c", 4)};
  auto run = g.Run("test", one, RequestDeadline(0), stream);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(state_.in_flight, 1);  // the slot count is back where it was
  state_.in_flight = 0;
  state_.draining = true;
  run = g.Run("test", one, RequestDeadline(0), stream);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(Count("test", "rejected"), 2);
  EXPECT_EQ(stream.events, 0);
}

TEST_F(GenerationTest, ADeadlineAbortsAndReportsTimeout) {
  RequestLimits limits;
  limits.request_timeout_s = 0.05;
  Generation g = Make(limits);
  RecordingStream stream;
  std::vector<engine::GenerateRequest> choices{Request("t", 1000)};
  auto run = g.Run("test", std::move(choices), RequestDeadline(limits.request_timeout_s), stream);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->outcome, Outcome::kTimeout);
  EXPECT_EQ(run->error.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(run->error.message().find("limits.request_timeout_s"), std::string::npos);
  EXPECT_EQ(run->finals[0].finish_reason, engine::FinishReason::kAborted);
  EXPECT_EQ(stream.timed_out_finals, 1);
  EXPECT_EQ(Count("test", "timeout"), 1);
  ExpectEngineIdle();
}

TEST_F(GenerationTest, ADepartedClientAbortsEveryChoice) {
  Generation g = Make();
  for (const bool by_write : {false, true}) {
    RecordingStream stream;
    (by_write ? stream.fail_writes_after : stream.gone_after_events) = 2;
    std::vector<engine::GenerateRequest> choices{Request("g-0", 1000), Request("g-1", 1000)};
    auto run = g.Run("test", std::move(choices), RequestDeadline(0), stream);
    ASSERT_TRUE(run.ok());
    EXPECT_EQ(run->outcome, Outcome::kAborted) << by_write;
    for (const engine::GenerateEvent& f : run->finals) {
      EXPECT_EQ(f.finish_reason, engine::FinishReason::kAborted);
      EXPECT_LT(f.usage.completion_tokens, 1000);
    }
    ExpectEngineIdle();
  }
  EXPECT_EQ(Count("test", "aborted"), 2);
}

TEST_F(GenerationTest, ARefusedChoiceAbortsTheOnesAlreadyQueued) {
  Generation g = Make();
  RecordingStream stream;
  // The second choice reuses the first one's id: the engine refuses it after the first was queued.
  std::vector<engine::GenerateRequest> choices{Request("dup", 200), Request("dup", 200)};
  auto run = g.Run("test", std::move(choices), RequestDeadline(0), stream);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Count("test", "rejected"), 1);
  ExpectEngineIdle();
  EXPECT_EQ(state_.in_flight, 0);
}

// Fault injection: an engine whose requests fail with an I/O error (the real one does so only on a KV read
// fault past its recompute budget).
class FailingEngine final : public engine::EngineApi {
 public:
  engine::ModelInfo Info() const override {
    engine::ModelInfo i;
    i.context_length = 64;
    i.vocab_size = 32;
    return i;
  }
  std::vector<int32_t> Tokenize(std::string_view, engine::TokenizeOptions) const override { return {1}; }
  StatusOr<std::string> Detokenize(std::span<const int32_t>) const override { return std::string(); }
  std::string TokenText(int32_t) const override { return ""; }
  StatusOr<std::vector<int32_t>> ChatPrompt(const std::vector<engine::ChatMessage>&,
                                            const std::vector<engine::ToolSpec>&) const override {
    return std::vector<int32_t>{1};
  }
  StatusOr<std::shared_ptr<const engine::CompiledConstraint>> CompileConstraint(
      const engine::ConstraintSpec&) const override {
    return UnimplementedError("no constraints here");
  }
  Status Submit(engine::GenerateRequest, engine::EventSink sink) override {
    engine::GenerateEvent ev;
    ev.final = true;
    ev.finish_reason = engine::FinishReason::kError;
    ev.error = IoError("the cold tier could not read a page back");
    sink(std::move(ev));
    return Status::Ok();
  }
  bool Abort(const std::string&) override { return false; }
  Status LoadLora(const std::string&, const std::string&, float) override { return UnimplementedError("no LoRA"); }
  Status UnloadLora(const std::string&) override { return UnimplementedError("no LoRA"); }
  std::vector<engine::LoraInfo> Loras() const override { return {}; }
  void StopAdmitting() override {}
  void CancelAll() override {}
  engine::EngineStats Stats() const override { return {}; }
  std::vector<engine::HeadPlacement> HeadPlacements() const override { return {}; }
  std::vector<engine::KvEventRecord> KvEventsSince(uint64_t, size_t, int, uint64_t*) const override { return {}; }
  uint64_t LastKvEvent() const override { return 0; }
};

TEST(GenerationFaultTest, AnEngineErrorIsTheResultsError) {
  FailingEngine engine;
  Metrics metrics(0);
  ServerState state;
  Generation g({}, &engine, &metrics, &state);
  RecordingStream stream;
  engine::GenerateRequest r;
  r.id = "f";
  r.prompt = {1};
  r.max_tokens = 4;
  std::vector<engine::GenerateRequest> choices{r};
  auto run = g.Run("test", std::move(choices), RequestDeadline(0), stream);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->outcome, Outcome::kError);
  EXPECT_EQ(run->error.code(), StatusCode::kIoError);
  EXPECT_NE(metrics.Scrape({}).find("tqserve_requests_total{endpoint=\"test\",outcome=\"error\"} 1"),
            std::string::npos);
}

}  // namespace
}  // namespace tq::server
