// The prefix cache: full KV pages named by the tokens before and in them, reused by the next request with the
// same prefix, and kept in the cold tier across restarts.
//
// Names: page k of a sequence (tokens [128k, 128k + 128)) has the chain hash h_k = PrefixHash(h_{k-1}, tokens of
// page k), h_{-1} = the model and layout fingerprint. Equal hashes mean equal tokens from position 0 through the
// page's end (64-bit FNV-1a chain, mixed; a collision is astronomically unlikely and would need equal fingerprints).
// An entry is one page index of one prefix: the page ids of every paged (layer, KV head), plus each head's
// transform (value scale, key mean and scale) for page 0. A lookup walks h_0, h_1, ... and stops at the first missing entry.
//
// Ownership: an entry holds one reference on each of its pages (KvPageStore::Retain), a sequence using them holds
// its own. Budget: entries' page bytes <= budget_bytes; leaf entries (no longer entry extends them) are evicted in
// the order of an EvictionPolicy (engine/kv/eviction.h; least recently used unless told otherwise); an entry used
// within `pin_seconds` is pinned and never evicted. Pages of entries no sequence
// uses move to the cold tier (durable) when there is one; at start-up, recovered cold pages whose entries are
// complete (every head present) become entries again, the rest are released.
//
// Threading: the engine thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/kv/eviction.h"
#include "engine/kv/page_store.h"

namespace tq::engine {

uint64_t PrefixHash(uint64_t parent, std::span<const int32_t> page_tokens);

// The seed of a salted chain (cache_salt): h_0 = PrefixHash(SaltedRoot(fingerprint, salt), tokens of page 0),
// while page 0's recorded parent stays the fingerprint, so salted entries are recovered at start-up like the
// rest. Chains of different salts (and the unsalted one, salt "") share no page. Returns `fingerprint` for "".
uint64_t SaltedRoot(uint64_t fingerprint, std::string_view salt);

struct PrefixEntry {
  uint64_t hash = 0;
  uint64_t parent = 0;  // hash of the previous page (the fingerprint for page 0)
  uint32_t page_index = 0;
  std::vector<PageId> pages;                  // [n_layers * n_kv_heads], kNoPage where a layer is not paged
  std::vector<HeadTransform> transforms;      // page 0: [n_layers * n_kv_heads], what the sequence fixed
  uint64_t bytes = 0;                         // the pages' bytes
  int children = 0;                           // entries whose parent this is
  std::chrono::steady_clock::time_point last_used;
};

class PrefixCache {
 public:
  using Clock = std::chrono::steady_clock;

  // `policy`: null = least recently used first.
  PrefixCache(KvPageStore* store, int n_layers, int n_kv_heads, uint64_t budget_bytes, double pin_seconds,
              std::unique_ptr<EvictionPolicy> policy = nullptr);
  ~PrefixCache();  // keeps its pages: cold ones stay on disk for the next start (the store must close next)

  // The longest run of entries along `hashes` (h_0, h_1, ...); marks them used.
  std::vector<const PrefixEntry*> Lookup(std::span<const uint64_t> hashes, Clock::time_point now);
  // Counts a lookup's outcome (the engine decides how many of the pages it uses).
  void CountLookup(uint64_t tokens_reused);
  // Adds page `page_index` of a prefix unless it is there; takes a reference on its pages. Pages with id 0 (not in
  // the store) make the entry unusable: nothing is added.
  void Insert(uint64_t hash, uint64_t parent, uint32_t page_index, std::vector<PageId> pages,
              std::vector<HeadTransform> transforms, Clock::time_point now);
  bool Contains(uint64_t hash) const { return entries_.count(hash) != 0; }
  // Drops an entry and everything that extends it (e.g. its pages failed to read back).
  void Erase(uint64_t hash);
  // Evicts the policy's choice among the unpinned leaf entries; false when none can go.
  bool EvictOne(Clock::time_point now);
  // Evicts until within the budget.
  void Trim(Clock::time_point now);
  // Moves the RAM pages that only the cache still uses to the cold tier. Returns how many moved.
  size_t Demote(size_t max_pages);
  // Turns pages recovered from the cold tier into entries; incomplete ones are released.
  void Adopt(std::vector<RecoveredPage> pages, uint64_t fingerprint);

  PrefixCacheStats stats() const;

 private:
  void Drop(std::unordered_map<uint64_t, PrefixEntry>::iterator it);
  void Touch(PrefixEntry& e, Clock::time_point now);  // last_used = now, telling the policy when it is a leaf

  KvPageStore* store_;
  int n_layers_, n_kv_heads_;
  uint64_t budget_;
  double pin_seconds_;
  std::unordered_map<uint64_t, PrefixEntry> entries_;
  std::unordered_multimap<uint64_t, uint64_t> children_;          // parent hash -> child hashes (for Erase)
  std::unique_ptr<EvictionPolicy> policy_;                         // holds the leaves (entries without children)
  PrefixCacheStats stats_;
};

}  // namespace tq::engine
