// Helpers of the engine tests: requests run at once on a real Engine, their tokens and final events
// collected.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/runner/engine.h"

namespace tq::engine::testing {

struct Outcome {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::kNone;
  Status error;
  int cached_tokens = 0;
};

// Collects the events of several requests and waits for all to end.
class Collector {
 public:
  EventSink Sink(int i) {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<int>(out_.size()) <= i) out_.resize(i + 1);
    return [this, i](GenerateEvent&& ev) {
      std::lock_guard<std::mutex> held(mu_);
      for (const GeneratedToken& t : ev.tokens) out_[i].tokens.push_back(t.id);
      if (ev.final) {
        out_[i].reason = ev.finish_reason;
        out_[i].error = ev.error;
        out_[i].cached_tokens = ev.usage.cached_prompt_tokens;
        ++done_;
        cv_.notify_all();
      }
    };
  }
  std::vector<Outcome> Wait(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_ >= n; });
    return out_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Outcome> out_;
  int done_ = 0;
};

inline std::vector<int32_t> Prompt(const Engine& e, int n_tokens) {
  std::string text;
  while (static_cast<int>(e.tokenizer().Encode(text).size()) < n_tokens) {
    text += "The tiers of the cache keep the pages that matter close and the rest on disk. ";
  }
  std::vector<int32_t> ids = e.tokenizer().Encode(text);
  ids.resize(n_tokens);
  return ids;
}

// The engine's stats once the step that finished the last request has been accounted (the gauges and the KV
// stats are refreshed after each step, after its final events went out).
inline EngineStats SettledStats(const Engine& e) {
  for (int i = 0; i < 2000; ++i) {
    const EngineStats s = e.Stats();
    if (s.running == 0 && s.waiting == 0) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return e.Stats();
}

// Runs the requests (prompt lengths, max_tokens each) at once on `e` and returns their outcomes and the
// stats.
inline std::pair<std::vector<Outcome>, EngineStats> RunOn(Engine& e,
                                                          const std::vector<std::pair<int, int>>& reqs) {
  Collector c;
  for (size_t i = 0; i < reqs.size(); ++i) {
    GenerateRequest r;
    r.id = "r" + std::to_string(i);
    r.prompt = Prompt(e, reqs[i].first);
    r.max_tokens = reqs[i].second;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    EXPECT_TRUE(e.Submit(std::move(r), c.Sink(static_cast<int>(i))).ok());
  }
  std::vector<Outcome> out = c.Wait(static_cast<int>(reqs.size()));
  return {out, SettledStats(e)};
}

// The same on a fresh engine.
inline std::pair<std::vector<Outcome>, EngineStats> RunAll(const EngineOptions& o,
                                                           const std::vector<std::pair<int, int>>& reqs) {
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  if (!e.ok()) return {};
  return RunOn(**e, reqs);
}

}  // namespace tq::engine::testing
