// Which prefix-cache entry goes first when the cache is over its budget or the tiers are full. The cache offers a
// policy only the entries it may evict (leaves: nothing extends them) and keeps their last use itself; the policy
// picks among them. Time comes in as arguments, so tests step it. LRU is the policy the engine uses.
//
// Threading: the owner's (the engine thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

namespace tq::engine {

class EvictionPolicy {
 public:
  using Clock = std::chrono::steady_clock;

  virtual ~EvictionPolicy() = default;
  virtual std::string_view name() const = 0;
  // `key` may now be evicted; it was last used at `last_used`.
  virtual void Add(uint64_t key, Clock::time_point last_used) = 0;
  // `key` may no longer be evicted (dropped, or another entry extends it); `last_used` as the policy last saw it.
  virtual void Remove(uint64_t key, Clock::time_point last_used) = 0;
  // An evictable `key`, last used at `before`, is used again at `now`.
  virtual void Use(uint64_t key, Clock::time_point before, Clock::time_point now) = 0;
  // The entry to evict at `now`, never one used within `pin` of it; nullopt when none may go.
  virtual std::optional<uint64_t> Victim(Clock::time_point now, Clock::duration pin) const = 0;
};

// Least recently used first.
std::unique_ptr<EvictionPolicy> MakeLruPolicy();

}  // namespace tq::engine
