#include "server/metrics.h"

#include <prometheus/text_serializer.h>

#include "server/kv_metrics.h"

namespace tq::server {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

// Latency buckets in seconds, 5 ms to 2 min.
Histogram::BucketBoundaries LatencyBuckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
}
// Per-token buckets in seconds, 1 ms to 2 s.
Histogram::BucketBoundaries TokenBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.15, 0.3, 0.6, 1, 2};
}

}  // namespace

Metrics::Metrics(uint64_t kv_capacity_bytes)
    : registry_(std::make_shared<prometheus::Registry>()),
      requests_(BuildCounter().Name("tqserve_requests_total").Help("Requests by endpoint and outcome")
                    .Register(*registry_)),
      prompt_tokens_(BuildCounter().Name("tqserve_prompt_tokens_total").Help("Prompt tokens processed")
                         .Register(*registry_).Add({})),
      generated_tokens_(BuildCounter().Name("tqserve_generation_tokens_total").Help("Tokens generated")
                            .Register(*registry_).Add({})),
      ttft_(BuildHistogram().Name("tqserve_time_to_first_token_seconds").Help("Time to first token")
                .Register(*registry_).Add({}, LatencyBuckets())),
      tpot_(BuildHistogram().Name("tqserve_time_per_output_token_seconds")
                .Help("Mean time per output token after the first, per request").Register(*registry_)
                .Add({}, TokenBuckets())),
      e2e_(BuildHistogram().Name("tqserve_e2e_request_latency_seconds").Help("End-to-end request latency")
               .Register(*registry_).Add({}, LatencyBuckets())),
      queue_(BuildHistogram().Name("tqserve_request_queue_time_seconds").Help("Time waiting before admission")
                 .Register(*registry_).Add({}, LatencyBuckets())),
      running_(BuildGauge().Name("tqserve_num_requests_running").Help("Requests in the running batch")
                   .Register(*registry_).Add({})),
      waiting_(BuildGauge().Name("tqserve_num_requests_waiting").Help("Requests waiting for admission")
                   .Register(*registry_).Add({})),
      kv_usage_(BuildGauge().Name("tqserve_kv_cache_usage_ratio")
                    .Help("KV bytes held over the KV capacity (0 to 1)").Register(*registry_).Add({})),
      kv_bytes_(BuildGauge().Name("tqserve_kv_cache_bytes").Help("KV bytes held by live sequences")
                    .Register(*registry_).Add({})),
      kv_capacity_(BuildGauge().Name("tqserve_kv_cache_capacity_bytes").Help("KV capacity in bytes")
                       .Register(*registry_).Add({})),
      draining_(BuildGauge().Name("tqserve_draining").Help("1 while the server drains after SIGTERM")
                    .Register(*registry_).Add({})),
      engine_steps_(BuildCounter().Name("tqserve_engine_steps_total").Help("Engine scheduling steps run")
                        .Register(*registry_).Add({})),
      responses_stored_(BuildGauge().Name("tqserve_responses_stored")
                            .Help("Responses kept for previous_response_id (/v1/responses, store: true)")
                            .Register(*registry_).Add({})),
      responses_bytes_(BuildGauge().Name("tqserve_responses_stored_bytes").Help("Bytes of the stored responses")
                           .Register(*registry_).Add({})),
      responses_evicted_(BuildCounter().Name("tqserve_responses_evicted_total")
                             .Help("Stored responses dropped for space or age").Register(*registry_).Add({})),
      kv_capacity_bytes_(kv_capacity_bytes) {
  kv_capacity_.Set(static_cast<double>(kv_capacity_bytes));
}

void Metrics::CountRequest(std::string_view endpoint, std::string_view outcome) {
  requests_.Add({{"endpoint", std::string(endpoint)}, {"outcome", std::string(outcome)}}).Increment();
}

void Metrics::ObserveFinished(const engine::GenerateEvent& e) {
  prompt_tokens_.Increment(e.usage.prompt_tokens);
  generated_tokens_.Increment(e.usage.completion_tokens);
  e2e_.Observe(e.timings.total_seconds);
  queue_.Observe(e.timings.queue_seconds);
  if (e.usage.completion_tokens > 0) ttft_.Observe(e.timings.time_to_first_token_seconds);
  if (e.usage.completion_tokens > 1 && e.timings.generated_tokens_per_second > 0) {
    tpot_.Observe(1.0 / e.timings.generated_tokens_per_second);
  }
}

void Metrics::SetDraining(bool draining) { draining_.Set(draining ? 1 : 0); }

void Metrics::SetResponseStore(const ResponseStoreStats& s) {
  std::lock_guard<std::mutex> lock(scrape_mu_);
  responses_stored_.Set(static_cast<double>(s.entries));
  responses_bytes_.Set(static_cast<double>(s.bytes));
  if (s.evicted_total > last_evicted_) responses_evicted_.Increment(static_cast<double>(s.evicted_total - last_evicted_));
  last_evicted_ = s.evicted_total;
}

std::string Metrics::Scrape(const engine::EngineStats& s) {
  std::lock_guard<std::mutex> lock(scrape_mu_);
  running_.Set(s.running);
  waiting_.Set(s.waiting);
  kv_bytes_.Set(static_cast<double>(s.kv_bytes));
  // Usage as admission sees it: the share of tier slots in use (the running sequences' tail pages aside).
  kv_usage_.Set(KvUsageRatio(s.kv_store));
  if (s.steps > last_steps_) {
    engine_steps_.Increment(static_cast<double>(s.steps - last_steps_));
    last_steps_ = s.steps;
  }
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  for (prometheus::MetricFamily& f : KvMetricFamilies(s)) families.push_back(std::move(f));
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace tq::server
