#include "storage/tier_stats.h"

namespace tq::storage {

std::string_view TierErrorName(TierError kind) {
  switch (kind) {
    case TierError::kIo: return "io";
    case TierError::kDataLoss: return "data_loss";
    case TierError::kNoSpace: return "no_space";
    case TierError::kOverBudget: return "over_budget";
    case TierError::kDroppedAtOpen: return "dropped_at_open";
  }
  return "unknown";
}

void TierStats::RecordRead(uint64_t bytes) {
  reads_.fetch_add(1, std::memory_order_relaxed);
  read_bytes_.fetch_add(bytes, std::memory_order_relaxed);
}

void TierStats::RecordRead(uint64_t bytes, uint64_t latency_ns) {
  RecordRead(bytes);
  latency_count_.fetch_add(1, std::memory_order_relaxed);
  latency_sum_ns_.fetch_add(latency_ns, std::memory_order_relaxed);
  const double seconds = static_cast<double>(latency_ns) * 1e-9;
  size_t b = 0;
  while (b < kReadLatencyBuckets.size() && seconds > kReadLatencyBuckets[b]) ++b;
  buckets_[b].fetch_add(1, std::memory_order_relaxed);
}

void TierStats::RecordWrite(uint64_t bytes) {
  writes_.fetch_add(1, std::memory_order_relaxed);
  write_bytes_.fetch_add(bytes, std::memory_order_relaxed);
}

TierStatsSnapshot TierStats::Snapshot() const {
  TierStatsSnapshot s;
  s.bytes_capacity = capacity_.load(std::memory_order_relaxed);
  s.bytes_used = used_.load(std::memory_order_relaxed);
  s.pages = pages_.load(std::memory_order_relaxed);
  s.reads = reads_.load(std::memory_order_relaxed);
  s.writes = writes_.load(std::memory_order_relaxed);
  s.read_bytes = read_bytes_.load(std::memory_order_relaxed);
  s.write_bytes = write_bytes_.load(std::memory_order_relaxed);
  s.read_latency_count = latency_count_.load(std::memory_order_relaxed);
  s.read_latency_sum_seconds = static_cast<double>(latency_sum_ns_.load(std::memory_order_relaxed)) * 1e-9;
  for (size_t i = 0; i < buckets_.size(); ++i)
    s.read_latency_buckets[i] = buckets_[i].load(std::memory_order_relaxed);
  for (size_t i = 0; i < errors_.size(); ++i) s.errors[i] = errors_[i].load(std::memory_order_relaxed);
  return s;
}

}  // namespace tq::storage
