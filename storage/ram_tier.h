// The hot and warm tiers on the host: a byte-budgeted arena of fixed-size page slots in RAM.
//
// The warm tier asks for its arena to be locked in memory (mlock: no swapping, and pinned host memory for DMA
// when CUDA lands); where the limit (RLIMIT_MEMLOCK) refuses it, the tier logs it and runs unlocked (locked()
// false). The hot tier on a machine without a GPU is the same arena without locking. Pages are read in place
// (Get: a view into the arena that stays valid until the page is erased or replaced) or copied out (Read).
//
// Invariants: capacity_bytes / slot_bytes slots; a Put or Allocate with no free slot is resource_exhausted
// and changes nothing. Threading: one thread calls the methods; stats() may be read from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "storage/tier_stats.h"

namespace tq::storage {

struct RamTierOptions {
  std::string name = "hot";     // for logs: "hot" or "warm"
  uint64_t capacity_bytes = 0;  // budget: whole slots
  uint32_t max_page_bytes = 0;  // largest page; a slot is this rounded up to 64 bytes
  bool lock_memory = false;     // mlock the arena (the warm tier)
};

class RamTier {
 public:
  // Reserves the arena (anonymous memory; touched lazily unless locked).
  static StatusOr<std::unique_ptr<RamTier>> Open(const RamTierOptions& options);
  ~RamTier();
  RamTier(const RamTier&) = delete;
  RamTier& operator=(const RamTier&) = delete;

  // A slot of `length` bytes for `page_id`, to be filled in place; replaces an earlier page with that id.
  StatusOr<std::span<std::byte>> Allocate(uint64_t page_id, uint32_t length);
  // Allocate + copy.
  Status Put(uint64_t page_id, std::span<const std::byte> payload);
  // The page's bytes in place, or nullopt. Counts as a read.
  std::optional<std::span<const std::byte>> Get(uint64_t page_id);
  // Where the page's bytes lie, or nullopt; not a read (nothing is counted).
  std::optional<std::span<const std::byte>> Peek(uint64_t page_id) const;
  // Copies the page into dest; returns its length.
  StatusOr<uint32_t> Read(uint64_t page_id, std::span<std::byte> dest);
  Status Erase(uint64_t page_id);

  bool Contains(uint64_t page_id) const { return index_.count(page_id) != 0; }
  uint64_t pages() const { return index_.size(); }
  uint64_t slot_count() const { return slots_; }
  uint32_t slot_bytes() const { return slot_bytes_; }
  bool locked() const { return locked_; }
  const TierStats& stats() const { return stats_; }

 private:
  struct Entry {
    uint64_t slot = 0;
    uint32_t length = 0;
  };
  explicit RamTier(const RamTierOptions& options) : options_(options) {}
  std::byte* SlotData(uint64_t slot) const { return arena_ + slot * slot_bytes_; }
  void UpdateUsage() { stats_.SetUsage(index_.size() * uint64_t{slot_bytes_}, index_.size()); }

  RamTierOptions options_;
  std::byte* arena_ = nullptr;
  uint64_t arena_bytes_ = 0;
  uint32_t slot_bytes_ = 0;
  uint64_t slots_ = 0;
  bool locked_ = false;
  std::unordered_map<uint64_t, Entry> index_;
  std::vector<uint64_t> free_slots_;  // stack, lowest slot on top
  TierStats stats_;
};

}  // namespace tq::storage
