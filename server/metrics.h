// Prometheus metrics of the daemon (prefix tqserve_, base units, counters end in _total), exposed at /metrics.
// Only the server knows prometheus-cpp; the engine reports plain numbers (EngineStats).
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "engine/api.h"
#include "server/response_store.h"

namespace tq::server {

class Metrics {
 public:
  // `kv_capacity_bytes`: the KV tiers' budgets together.
  explicit Metrics(uint64_t kv_capacity_bytes);

  // outcome: "success", "error", "aborted", "rejected", "invalid", "unauthorized", "timeout", "shutdown".
  void CountRequest(std::string_view endpoint, std::string_view outcome);
  // After a request's final event.
  void ObserveFinished(const engine::GenerateEvent& final_event);
  void SetDraining(bool draining);
  // The /v1/responses store's occupancy (before Scrape).
  void SetResponseStore(const ResponseStoreStats& stats);

  // Refreshes the gauges from the engine and returns the text exposition format.
  std::string Scrape(const engine::EngineStats& stats);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Counter& prompt_tokens_;
  prometheus::Counter& generated_tokens_;
  prometheus::Histogram& ttft_;
  prometheus::Histogram& tpot_;
  prometheus::Histogram& e2e_;
  prometheus::Histogram& queue_;
  prometheus::Gauge& running_;
  prometheus::Gauge& waiting_;
  prometheus::Gauge& kv_usage_;
  prometheus::Gauge& kv_bytes_;
  prometheus::Gauge& kv_capacity_;
  prometheus::Gauge& draining_;
  prometheus::Counter& engine_steps_;
  prometheus::Gauge& responses_stored_;
  prometheus::Gauge& responses_bytes_;
  prometheus::Counter& responses_evicted_;
  uint64_t last_evicted_ = 0;  // guarded by scrape_mu_
  std::mutex scrape_mu_;  // guards last_steps_
  uint64_t last_steps_ = 0;
  uint64_t kv_capacity_bytes_;
};

}  // namespace tq::server
