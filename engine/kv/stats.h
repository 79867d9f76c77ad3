// Snapshots of the KV manager's state (tiers, precision classes, cold cache, prefix cache): plain values any
// thread may copy; the engine fills them (Engine::Stats) and the front ends export them (metrics, /kv/state).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/kv/precision.h"
#include "storage/tier_stats.h"

namespace tq::engine {

enum class KvTier : uint8_t { kHot = 0, kWarm = 1, kCold = 2 };
inline constexpr int kKvTiers = 3;
std::string_view KvTierName(KvTier tier);  // "hot", "warm", "cold"

struct ColdCacheStats {
  uint64_t cached_bytes = 0;   // page bytes in the cache now
  uint64_t cached_pages = 0;
  uint64_t prefetch_hits = 0;  // Get found the page ready
  uint64_t prefetch_late = 0;  // Get waited for a read already in flight
  uint64_t misses = 0;         // Get found nothing and read synchronously
  uint64_t evictions = 0;
  uint64_t read_failures = 0;
  uint64_t write_failures = 0;
  uint64_t stall_ns = 0;       // time Get spent waiting for reads
  uint64_t read_ios = 0;       // read I/Os the store submitted (adjacent pages read together count once)
};

struct KvTierUsage {
  bool present = false;
  uint64_t pages = 0;
  uint64_t bytes = 0;           // page payload bytes
  uint64_t capacity_bytes = 0;  // the budget
  uint64_t slot_bytes = 0;      // pages occupy whole slots (one in RAM; in the cold tier as many as they need)
  uint64_t slots = 0;
  uint64_t slots_used = 0;
  storage::TierStatsSnapshot io;  // reads, writes, latency, errors as the tier counted them
};

struct KvStoreStats {
  std::array<KvTierUsage, kKvTiers> tiers;
  std::array<uint64_t, 3> class_pages{};  // by PrecisionClass
  std::array<uint64_t, 3> class_bytes{};
  ColdCacheStats cold_cache;
  uint64_t fallbacks = 0;  // pages placed outside their class's home tier
  uint64_t rehomed = 0;    // cold pages moved to RAM after a failed write
  uint64_t refused = 0;    // Store calls that found no room anywhere
  uint64_t cold_held = 0;  // cold page reads attention served from pins kept since the step before
  // An optional cold tier (KvStoreOptions::cold_optional) could not be opened: the reason; "" otherwise.
  std::string cold_unavailable;
};

struct PrefixCacheStats {
  uint64_t entries = 0;
  uint64_t bytes = 0;
  uint64_t lookups = 0;
  uint64_t hits = 0;           // lookups that reused at least one page
  uint64_t hit_tokens = 0;     // prompt tokens whose KV came from the cache
  uint64_t evictions = 0;
  uint64_t recovered_entries = 0;
};

// What happened to a page, in the event log (KvPageStore::EventsSince, the gRPC SubscribeKvEvents stream).
enum class KvEventKind : uint8_t { kStored, kMoved, kEvicted };
std::string_view KvEventKindName(KvEventKind kind);  // "stored", "moved", "evicted"

}  // namespace tq::engine
