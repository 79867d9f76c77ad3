#include "engine/kv/eviction.h"

#include <set>
#include <utility>

namespace tq::engine {
namespace {

class LruPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "lru"; }
  void Add(uint64_t key, Clock::time_point last_used) override { order_.insert({last_used, key}); }
  void Remove(uint64_t key, Clock::time_point last_used) override { order_.erase({last_used, key}); }
  void Use(uint64_t key, Clock::time_point before, Clock::time_point now) override {
    order_.erase({before, key});
    order_.insert({now, key});
  }
  std::optional<uint64_t> Victim(Clock::time_point now, Clock::duration pin) const override {
    // The oldest use first: when even it is pinned, every entry is.
    if (order_.empty() || now - order_.begin()->first < pin) return std::nullopt;
    return order_.begin()->second;
  }

 private:
  std::set<std::pair<Clock::time_point, uint64_t>> order_;  // (last use, key), oldest first
};

}  // namespace

std::unique_ptr<EvictionPolicy> MakeLruPolicy() { return std::make_unique<LruPolicy>(); }

}  // namespace tq::engine
