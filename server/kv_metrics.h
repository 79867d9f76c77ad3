// Prometheus families of the KV manager (tqserve_kv_*), built at scrape time from the engine's snapshot: per tier
// (bytes, capacity, pages, reads, writes, read latency, errors), per precision class (heads, pages, bytes), the
// cold cache and prefetch (hits, late, misses, stall time), fallbacks, re-homed pages, preemptions, recomputes.
// Counters come straight from the engine's cumulative totals, so nothing here keeps state.
#pragma once

#include <prometheus/metric_family.h>

#include <vector>

#include "engine/api.h"

namespace tq::server {

std::vector<prometheus::MetricFamily> KvMetricFamilies(const engine::EngineStats& stats);

// Share of the KV tiers' slots in use (0 to 1), over the tiers present; 0 without tiers.
double KvUsageRatio(const engine::KvStoreStats& stats);

}  // namespace tq::server
