// Counters of one storage tier, for the server's Prometheus exporter (tqserve_kv_tier_* per DESIGN.md).
// The tier updates them; any thread may take a Snapshot. Units: bytes, counts, seconds.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string_view>

namespace tq::storage {

// Upper bounds (seconds) of the read latency histogram buckets; one more bucket, +Inf, follows.
inline constexpr std::array<double, 12> kReadLatencyBuckets = {25e-6,  50e-6, 100e-6, 250e-6, 500e-6, 1e-3,
                                                               2.5e-3, 5e-3,  10e-3,  25e-3,  100e-3, 1.0};

// Kinds of error a tier counts; names are stable (metric label values).
enum class TierError : uint8_t {
  kIo,             // the OS refused a read or write (EIO, ...)
  kDataLoss,       // short read or checksum mismatch on read
  kNoSpace,        // ENOSPC from the file system
  kOverBudget,     // a Put past the tier's byte budget
  kDroppedAtOpen,  // a corrupt page found and dropped while rebuilding the index
};
inline constexpr size_t kTierErrorKinds = 5;
std::string_view TierErrorName(TierError kind);

struct TierStatsSnapshot {
  uint64_t bytes_used = 0;      // bytes the tier's pages occupy (cold: whole slots on disk)
  uint64_t bytes_capacity = 0;  // the tier's budget
  uint64_t pages = 0;
  uint64_t reads = 0, writes = 0;            // completed successfully
  uint64_t read_bytes = 0, write_bytes = 0;  // payload bytes
  uint64_t read_latency_count = 0;
  double read_latency_sum_seconds = 0.0;
  std::array<uint64_t, kReadLatencyBuckets.size() + 1> read_latency_buckets{};  // per bucket, not cumulative
  std::array<uint64_t, kTierErrorKinds> errors{};                               // indexed by TierError
};

class TierStats {
 public:
  void SetCapacity(uint64_t bytes) { capacity_.store(bytes, std::memory_order_relaxed); }
  void SetUsage(uint64_t bytes_used, uint64_t pages) {
    used_.store(bytes_used, std::memory_order_relaxed);
    pages_.store(pages, std::memory_order_relaxed);
  }
  // A read with its latency (cold tier: from SubmitReads to the checked bytes in the caller's buffer).
  void RecordRead(uint64_t bytes, uint64_t latency_ns);
  // A read without a latency sample (RAM tiers: a lookup, nothing worth a histogram).
  void RecordRead(uint64_t bytes);
  void RecordWrite(uint64_t bytes);
  void RecordError(TierError kind) {
    errors_[static_cast<size_t>(kind)].fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t errors(TierError kind) const {
    return errors_[static_cast<size_t>(kind)].load(std::memory_order_relaxed);
  }

  TierStatsSnapshot Snapshot() const;

 private:
  std::atomic<uint64_t> capacity_{0}, used_{0}, pages_{0};
  std::atomic<uint64_t> reads_{0}, writes_{0}, read_bytes_{0}, write_bytes_{0};
  std::atomic<uint64_t> latency_count_{0}, latency_sum_ns_{0};
  std::array<std::atomic<uint64_t>, kReadLatencyBuckets.size() + 1> buckets_{};
  std::array<std::atomic<uint64_t>, kTierErrorKinds> errors_{};
};

}  // namespace tq::storage
