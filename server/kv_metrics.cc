#include "server/kv_metrics.h"

#include <string>


namespace tq::server {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily Family(std::string name, std::string help, MetricType type) {
  MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

void Add(MetricFamily* f, std::vector<ClientMetric::Label> labels, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  if (f->type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f->metric.push_back(std::move(m));
}

}  // namespace

double KvUsageRatio(const engine::KvStoreStats& s) {
  double used = 0, total = 0;
  for (const engine::KvTierUsage& t : s.tiers) {
    if (!t.present) continue;
    used += static_cast<double>(t.slots_used) * t.slot_bytes;
    total += static_cast<double>(t.slots) * t.slot_bytes;
  }
  return total > 0 ? used / total : 0.0;
}

std::vector<MetricFamily> KvMetricFamilies(const engine::EngineStats& st) {
  const engine::KvStoreStats& s = st.kv_store;
  MetricFamily bytes = Family("tqserve_kv_tier_bytes", "KV page bytes held in the tier", MetricType::Gauge);
  MetricFamily capacity =
      Family("tqserve_kv_tier_capacity_bytes", "The tier's budget for KV pages", MetricType::Gauge);
  MetricFamily pages = Family("tqserve_kv_tier_pages", "KV pages in the tier", MetricType::Gauge);
  MetricFamily reads = Family("tqserve_kv_tier_reads_total", "Page reads the tier served", MetricType::Counter);
  MetricFamily writes = Family("tqserve_kv_tier_writes_total", "Pages written to the tier", MetricType::Counter);
  MetricFamily read_bytes =
      Family("tqserve_kv_tier_read_bytes_total", "Page bytes read from the tier", MetricType::Counter);
  MetricFamily write_bytes =
      Family("tqserve_kv_tier_write_bytes_total", "Page bytes written to the tier", MetricType::Counter);
  MetricFamily errors = Family("tqserve_kv_tier_errors_total", "Tier errors by kind", MetricType::Counter);
  MetricFamily latency = Family("tqserve_kv_tier_read_latency_seconds",
                                "Cold page read latency, from request to checked bytes", MetricType::Histogram);
  for (int t = 0; t < engine::kKvTiers; ++t) {
    const engine::KvTierUsage& u = s.tiers[t];
    if (!u.present) continue;
    const std::string tier(engine::KvTierName(static_cast<engine::KvTier>(t)));
    Add(&bytes, {{"tier", tier}}, static_cast<double>(u.bytes));
    Add(&capacity, {{"tier", tier}}, static_cast<double>(u.capacity_bytes));
    Add(&pages, {{"tier", tier}}, static_cast<double>(u.pages));
    Add(&reads, {{"tier", tier}}, static_cast<double>(u.io.reads));
    Add(&writes, {{"tier", tier}}, static_cast<double>(u.io.writes));
    Add(&read_bytes, {{"tier", tier}}, static_cast<double>(u.io.read_bytes));
    Add(&write_bytes, {{"tier", tier}}, static_cast<double>(u.io.write_bytes));
    for (size_t k = 0; k < storage::kTierErrorKinds; ++k) {
      Add(&errors, {{"tier", tier}, {"kind", std::string(storage::TierErrorName(static_cast<storage::TierError>(k)))}},
          static_cast<double>(u.io.errors[k]));
    }
    if (t == static_cast<int>(engine::KvTier::kCold)) {
      ClientMetric m;
      m.label = {{"tier", tier}};
      m.histogram.sample_count = u.io.read_latency_count;
      m.histogram.sample_sum = u.io.read_latency_sum_seconds;
      uint64_t cumulative = 0;
      for (size_t b = 0; b < u.io.read_latency_buckets.size(); ++b) {
        cumulative += u.io.read_latency_buckets[b];
        const double bound = b < storage::kReadLatencyBuckets.size() ? storage::kReadLatencyBuckets[b]
                                                                     : std::numeric_limits<double>::infinity();
        m.histogram.bucket.push_back({cumulative, bound});
      }
      latency.metric.push_back(std::move(m));
    }
  }
  MetricFamily class_heads =
      Family("tqserve_kv_class_heads", "(layer, KV head) pairs in each precision class", MetricType::Gauge);
  MetricFamily class_pages = Family("tqserve_kv_class_pages", "KV pages held per precision class", MetricType::Gauge);
  MetricFamily class_bytes =
      Family("tqserve_kv_class_bytes", "KV page bytes held per precision class", MetricType::Gauge);
  for (int c = 0; c < 3; ++c) {
    const std::string cls(engine::PrecisionClassName(static_cast<engine::PrecisionClass>(c)));
    Add(&class_heads, {{"class", cls}}, static_cast<double>(st.kv_class_heads[c]));
    Add(&class_pages, {{"class", cls}}, static_cast<double>(s.class_pages[c]));
    Add(&class_bytes, {{"class", cls}}, static_cast<double>(s.class_bytes[c]));
  }
  std::vector<MetricFamily> out = {bytes, capacity, pages, reads, writes, read_bytes, write_bytes, errors};
  if (!latency.metric.empty()) out.push_back(latency);
  out.insert(out.end(), {class_heads, class_pages, class_bytes});

  auto single = [&](std::string name, std::string help, MetricType type, double value) {
    MetricFamily f = Family(std::move(name), std::move(help), type);
    Add(&f, {}, value);
    out.push_back(std::move(f));
  };
  const engine::ColdCacheStats& cc = s.cold_cache;
  single("tqserve_kv_compression_ratio", "f16 KV bytes over the bytes the configured formats take",
         MetricType::Gauge, st.kv_bits_per_value > 0 ? 16.0 / st.kv_bits_per_value : 0.0);
  single("tqserve_kv_cold_tier_unavailable",
         "1 when the default cold directory could not be used and every page stays in RAM (the start-up log says why)",
         MetricType::Gauge, s.cold_unavailable.empty() ? 0.0 : 1.0);
  single("tqserve_kv_prefetch_hits_total", "Cold pages attention found ready in the cold cache", MetricType::Counter,
         static_cast<double>(cc.prefetch_hits));
  single("tqserve_kv_prefetch_held_total",
         "Cold pages attention read from pins it kept since the step before (no cold-cache visit)",
         MetricType::Counter, static_cast<double>(s.cold_held));
  single("tqserve_kv_prefetch_late_total", "Cold pages attention waited for (read in flight)", MetricType::Counter,
         static_cast<double>(cc.prefetch_late));
  single("tqserve_kv_prefetch_misses_total", "Cold pages attention had to read itself", MetricType::Counter,
         static_cast<double>(cc.misses));
  single("tqserve_kv_prefetch_stall_seconds_total", "Time attention waited for cold reads", MetricType::Counter,
         static_cast<double>(cc.stall_ns) * 1e-9);
  single("tqserve_kv_cold_cache_bytes", "Bytes in the RAM cache of cold pages", MetricType::Gauge,
         static_cast<double>(cc.cached_bytes));
  single("tqserve_kv_cold_cache_evictions_total", "Pages evicted from the cold cache", MetricType::Counter,
         static_cast<double>(cc.evictions));
  single("tqserve_kv_fallback_pages_total", "Pages placed outside their class's home tier (it was full)",
         MetricType::Counter, static_cast<double>(s.fallbacks));
  single("tqserve_kv_rehomed_pages_total", "Cold pages moved to RAM after a failed write", MetricType::Counter,
         static_cast<double>(s.rehomed));
  const engine::PrefixCacheStats& pc = st.prefix_cache;
  single("tqserve_kv_prefix_cache_entries", "Cached prefix pages (one per page index of a prefix, all heads)",
         MetricType::Gauge, static_cast<double>(pc.entries));
  single("tqserve_kv_prefix_cache_bytes", "Bytes of the pages the prefix cache holds", MetricType::Gauge,
         static_cast<double>(pc.bytes));
  single("tqserve_kv_prefix_cache_lookups_total", "Sequences that looked for a cached prefix", MetricType::Counter,
         static_cast<double>(pc.lookups));
  single("tqserve_kv_prefix_cache_hits_total", "Lookups that reused at least one cached page", MetricType::Counter,
         static_cast<double>(pc.hits));
  single("tqserve_kv_prefix_cache_hit_tokens_total", "Tokens whose KV came from the prefix cache",
         MetricType::Counter, static_cast<double>(pc.hit_tokens));
  single("tqserve_kv_prefix_cache_evictions_total", "Cached prefix entries evicted (budget or tier pressure)",
         MetricType::Counter, static_cast<double>(pc.evictions));
  single("tqserve_kv_class_changes_total", "Heads moved between ACTIVE and SPARSE by online adaptation",
         MetricType::Counter, static_cast<double>(st.class_changes_total));
  single("tqserve_preemptions_total", "Sequences sent back to the queue to free KV (recomputed later)",
         MetricType::Counter, static_cast<double>(st.preemptions_total));
  single("tqserve_kv_read_faults_total", "KV pages that could not be read back (I/O error, checksum)",
         MetricType::Counter, static_cast<double>(st.kv_faults_total));
  single("tqserve_kv_recomputes_total", "Sequences recomputed from their tokens after a KV read fault",
         MetricType::Counter, static_cast<double>(st.recomputes_total));
  return out;
}

}  // namespace tq::server
