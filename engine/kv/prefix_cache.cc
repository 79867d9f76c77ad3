#include "engine/kv/prefix_cache.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

#include "common/fnv.h"

namespace tq::engine {

uint64_t PrefixHash(uint64_t parent, std::span<const int32_t> page_tokens) {
  // FNV-1a from the standard basis over the parent's 8 bytes, then the token ids: every bit of the parent
  // reaches the hash.
  Fnv1a64 fnv;
  fnv.Mix(parent);
  for (int32_t t : page_tokens) fnv.Mix(static_cast<uint32_t>(t));
  uint64_t h = fnv.value();
  // A final avalanche (splitmix64) so nearby prefixes spread; never 0 (0 means "no hash").
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h == 0 ? 1 : h;
}

uint64_t SaltedRoot(uint64_t fingerprint, std::string_view salt) {
  if (salt.empty()) return fingerprint;
  // The salt's bytes as a token list after a marker no page holds (token ids are non-negative).
  std::vector<int32_t> bytes;
  bytes.reserve(salt.size() + 1);
  bytes.push_back(-1);
  for (unsigned char c : salt) bytes.push_back(c);
  return PrefixHash(fingerprint, bytes);
}

PrefixCache::PrefixCache(KvPageStore* store, int n_layers, int n_kv_heads, uint64_t budget_bytes, double pin_seconds,
                         std::unique_ptr<EvictionPolicy> policy)
    : store_(store),
      n_layers_(n_layers),
      n_kv_heads_(n_kv_heads),
      budget_(budget_bytes),
      pin_seconds_(pin_seconds),
      policy_(policy ? std::move(policy) : MakeLruPolicy()) {}

// The entries' references are not released: the store goes down right after (RAM pages with it) and cold pages
// must stay on disk for the next start.
PrefixCache::~PrefixCache() = default;

std::vector<const PrefixEntry*> PrefixCache::Lookup(std::span<const uint64_t> hashes, Clock::time_point now) {
  std::vector<const PrefixEntry*> out;
  for (uint64_t h : hashes) {
    auto it = entries_.find(h);
    if (it == entries_.end()) break;
    Touch(it->second, now);
    out.push_back(&it->second);
  }
  return out;
}

void PrefixCache::CountLookup(uint64_t tokens_reused) {
  ++stats_.lookups;
  if (tokens_reused > 0) {
    ++stats_.hits;
    stats_.hit_tokens += tokens_reused;
  }
}

void PrefixCache::Insert(uint64_t hash, uint64_t parent, uint32_t page_index, std::vector<PageId> pages,
                         std::vector<HeadTransform> transforms, Clock::time_point now) {
  if (budget_ == 0 || hash == 0 || entries_.count(hash) != 0) return;
  if (page_index > 0 && entries_.count(parent) == 0) return;  // only whole chains are reachable
  if (std::find(pages.begin(), pages.end(), kNoPage) != pages.end()) return;
  PrefixEntry e;
  e.hash = hash;
  e.parent = parent;
  e.page_index = page_index;
  for (PageId id : pages) {
    store_->Retain(id);
    e.bytes += store_->PageLength(id);
  }
  e.pages = std::move(pages);
  e.transforms = std::move(transforms);
  e.last_used = now;
  if (page_index > 0) {
    PrefixEntry& p = entries_.at(parent);
    if (p.children++ == 0) policy_->Remove(parent, p.last_used);
    children_.emplace(parent, hash);
  }
  stats_.bytes += e.bytes;
  entries_.emplace(hash, std::move(e));
  policy_->Add(hash, now);
  Trim(now);
}

void PrefixCache::Touch(PrefixEntry& e, Clock::time_point now) {
  if (e.children == 0) policy_->Use(e.hash, e.last_used, now);
  e.last_used = now;
}

void PrefixCache::Drop(std::unordered_map<uint64_t, PrefixEntry>::iterator it) {
  PrefixEntry& e = it->second;
  for (PageId id : e.pages) store_->Release(id);
  stats_.bytes -= e.bytes;
  if (e.children == 0) policy_->Remove(e.hash, e.last_used);
  if (e.page_index > 0) {
    auto [first, last] = children_.equal_range(e.parent);
    for (auto c = first; c != last; ++c) {
      if (c->second == e.hash) {
        children_.erase(c);
        break;
      }
    }
    auto parent = entries_.find(e.parent);
    if (parent != entries_.end() && --parent->second.children == 0) {
      policy_->Add(parent->first, parent->second.last_used);
    }
  }
  entries_.erase(it);
}

void PrefixCache::Erase(uint64_t hash) {
  // Children first (they name this entry as parent), depth first.
  std::vector<uint64_t> stack = {hash}, order;
  while (!stack.empty()) {
    const uint64_t h = stack.back();
    stack.pop_back();
    if (entries_.count(h) == 0) continue;
    order.push_back(h);
    auto [first, last] = children_.equal_range(h);
    for (auto c = first; c != last; ++c) stack.push_back(c->second);
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    auto e = entries_.find(*it);
    if (e != entries_.end()) Drop(e);
  }
}

bool PrefixCache::EvictOne(Clock::time_point now) {
  const auto pin = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(pin_seconds_));
  const std::optional<uint64_t> victim = policy_->Victim(now, pin);
  if (!victim) return false;
  Drop(entries_.find(*victim));
  ++stats_.evictions;
  return true;
}

void PrefixCache::Trim(Clock::time_point now) {
  while (stats_.bytes > budget_ && EvictOne(now)) {
  }
}

size_t PrefixCache::Demote(size_t max_pages) {
  if (!store_->has_cold_tier()) return 0;
  // Shallowest pages first: a restart recovers only entries whose whole chain back to page 0 is on disk, so a
  // crash in the middle of a demotion should find the first pages of many prefixes written, not the later pages
  // of prefixes whose beginnings were still in RAM.
  std::vector<std::pair<uint32_t, uint64_t>> order;  // (page index, hash)
  order.reserve(entries_.size());
  for (const auto& [hash, e] : entries_) order.push_back({e.page_index, hash});
  std::sort(order.begin(), order.end());
  size_t moved = 0;
  for (const auto& [index, hash] : order) {
    const PrefixEntry& e = entries_.at(hash);
    for (PageId id : e.pages) {
      if (moved >= max_pages) return moved;
      if (store_->refs(id) == 1 && store_->TierOf(id) != KvTier::kCold && store_->MoveToCold(id)) ++moved;
    }
  }
  return moved;
}

void PrefixCache::Adopt(std::vector<RecoveredPage> pages, uint64_t fingerprint) {
  const size_t heads = static_cast<size_t>(n_layers_) * n_kv_heads_;
  struct Group {
    uint64_t parent = 0;
    uint32_t page_index = 0;
    std::vector<PageId> pages;
    std::vector<HeadTransform> transforms;
  };
  std::map<uint64_t, Group> groups;
  std::vector<PageId> unused;
  for (RecoveredPage& p : pages) {
    const PageInfo& info = p.info;
    if (info.layer < 0 || info.layer >= n_layers_ || info.kv_head < 0 || info.kv_head >= n_kv_heads_) {
      unused.push_back(p.id);
      continue;
    }
    Group& g = groups[info.prefix_hash];
    if (g.pages.empty()) {
      g.pages.assign(heads, kNoPage);
      g.transforms.assign(heads, {});
      g.parent = info.parent_hash;
      g.page_index = info.page_index;
    }
    const size_t slot = static_cast<size_t>(info.layer) * n_kv_heads_ + info.kv_head;
    if (g.pages[slot] != kNoPage || g.page_index != info.page_index || g.parent != info.parent_hash) {
      unused.push_back(p.id);  // a duplicate (an unfinished sequence's copy) or inconsistent: not trusted
      continue;
    }
    g.pages[slot] = p.id;
    g.transforms[slot] = std::move(p.info.transform);
  }
  // Complete groups become entries, in page order so that each finds its parent.
  std::vector<std::pair<uint32_t, uint64_t>> order;
  for (auto& [hash, g] : groups) {
    const bool complete = std::find(g.pages.begin(), g.pages.end(), kNoPage) == g.pages.end();
    if (!complete) {
      for (PageId id : g.pages) {
        if (id != kNoPage) unused.push_back(id);
      }
      continue;
    }
    order.push_back({g.page_index, hash});
  }
  std::sort(order.begin(), order.end());
  const Clock::time_point now = Clock::now();
  for (const auto& [index, hash] : order) {
    Group& g = groups[hash];
    const bool rooted = index == 0 ? g.parent == fingerprint : entries_.count(g.parent) != 0;
    if (!rooted) {
      unused.insert(unused.end(), g.pages.begin(), g.pages.end());
      continue;
    }
    // The recovered reference becomes the entry's: Insert retains, so drop the recovery's own afterwards.
    Insert(hash, g.parent, index, g.pages, std::move(g.transforms), now);
    if (entries_.count(hash) != 0) ++stats_.recovered_entries;
    for (PageId id : g.pages) store_->Release(id);
  }
  for (PageId id : unused) store_->Release(id);
  if (!pages.empty()) {
    spdlog::info("prefix cache: {} entries ({} pages) recovered from the cold tier, {} pages released",
                 stats_.recovered_entries, stats_.recovered_entries * heads, unused.size());
  }
}

PrefixCacheStats PrefixCache::stats() const {
  PrefixCacheStats s = stats_;
  s.entries = entries_.size();
  return s;
}

}  // namespace tq::engine
