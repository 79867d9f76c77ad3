// Stored responses of /v1/responses (store: true): each response's conversation (the messages that led to it and
// its own output) so that a follow-up with previous_response_id continues it, plus the response object for
// GET /v1/responses/{id}. Bounded by count and bytes (least recently stored or used evicted first) and by age
// (entries older than the TTL are gone). Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/api.h"

namespace tq::server {

struct StoredResponse {
  std::string id;
  std::vector<engine::ChatMessage> conversation;  // input history, this request's input, then its output
  std::string response_json;                      // the response object as returned
  std::string cache_salt;                         // the KV namespace its turns used
  std::string tenant;                             // the API key's tenant that made it (ApiKeys' Caller)
};

struct ResponseStoreStats {
  uint64_t entries = 0;
  uint64_t bytes = 0;
  uint64_t evicted_total = 0;  // dropped for space or age
};

class ResponseStore {
 public:
  using Clock = std::chrono::steady_clock;
  // max_count 0 = storing is off (store: true is then refused by the route).
  ResponseStore(size_t max_count, uint64_t max_bytes, double ttl_seconds);

  // Stores (or replaces) `r`; entries are evicted until the bounds hold. An entry larger than max_bytes alone is
  // not stored (false).
  bool Put(StoredResponse r, Clock::time_point now = Clock::now());
  // The entry, refreshed as recently used; nullopt when absent or expired.
  std::optional<StoredResponse> Get(const std::string& id, Clock::time_point now = Clock::now());
  bool Erase(const std::string& id);
  ResponseStoreStats Stats() const;
  bool enabled() const { return max_count_ > 0; }

 private:
  struct Entry {
    StoredResponse value;
    uint64_t bytes = 0;
    Clock::time_point stored;
  };
  using List = std::list<Entry>;  // most recently used first
  void DropExpired(Clock::time_point now);
  void Remove(List::iterator it, bool evicted);

  const size_t max_count_;
  const uint64_t max_bytes_;
  const Clock::duration ttl_;
  mutable std::mutex mu_;
  List lru_;
  std::unordered_map<std::string, List::iterator> index_;
  ResponseStoreStats stats_;
};

}  // namespace tq::server
