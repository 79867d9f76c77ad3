#include "server/response_store.h"

namespace tq::server {
namespace {

uint64_t SizeOf(const StoredResponse& r) {
  uint64_t n = r.id.size() + r.response_json.size() + r.cache_salt.size() + sizeof(StoredResponse);
  for (const engine::ChatMessage& m : r.conversation) {
    n += sizeof(m) + m.role.size() + m.content.size() + m.tool_call_id.size() + m.name.size();
    for (const engine::ToolCall& c : m.tool_calls) n += sizeof(c) + c.id.size() + c.name.size() + c.arguments.size();
  }
  return n;
}

}  // namespace

ResponseStore::ResponseStore(size_t max_count, uint64_t max_bytes, double ttl_seconds)
    : max_count_(max_count),
      max_bytes_(max_bytes),
      ttl_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(ttl_seconds))) {}

void ResponseStore::Remove(List::iterator it, bool evicted) {
  stats_.bytes -= it->bytes;
  --stats_.entries;
  if (evicted) ++stats_.evicted_total;
  index_.erase(it->value.id);
  lru_.erase(it);
}

void ResponseStore::DropExpired(Clock::time_point now) {
  // Entries are stored in time order at the back of the age order only approximately (Get moves them to the
  // front), so every entry is checked; the store is small.
  for (auto it = lru_.begin(); it != lru_.end();) {
    auto next = std::next(it);
    if (now - it->stored > ttl_) Remove(it, true);
    it = next;
  }
}

bool ResponseStore::Put(StoredResponse r, Clock::time_point now) {
  if (!enabled()) return false;
  const uint64_t bytes = SizeOf(r);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(r.id); it != index_.end()) Remove(it->second, false);
  if (bytes > max_bytes_) return false;
  DropExpired(now);
  while (!lru_.empty() && (lru_.size() >= max_count_ || stats_.bytes + bytes > max_bytes_)) {
    Remove(std::prev(lru_.end()), true);
  }
  const std::string id = r.id;
  lru_.push_front({std::move(r), bytes, now});
  index_[id] = lru_.begin();
  stats_.bytes += bytes;
  ++stats_.entries;
  return true;
}

std::optional<StoredResponse> ResponseStore::Get(const std::string& id, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  if (now - it->second->stored > ttl_) {
    Remove(it->second, true);
    return std::nullopt;
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  return lru_.front().value;
}

bool ResponseStore::Erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return false;
  Remove(it->second, false);
  return true;
}

ResponseStoreStats ResponseStore::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace tq::server
