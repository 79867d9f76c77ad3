// The GPU machine's hot and warm tiers as PageTiers of the shared page store (engine/kv/page_store.h): a SlabPool
// of one-page slots in device memory (HBM: the hot tier) or pinned host memory (the warm tier, which the GPU reads
// by staging a layer's pages ahead of attention), so the store's page table, placement policy, prefix cache and
// preemption hold for GPU pages as for CPU ones. With HostMemory() it is a plain host arena: the host side of this
// design, tested on machines without a GPU.
//
// Pages the CPU can read in place (host and pinned memory) are returned by Write and pinned where they lie; device
// pages are copied out to the host by Pin (saving the prefix cache, moving a page to disk), and the GPU reads them
// at Address(). Threading: as PageTier; Address may be called by any thread while nothing writes or frees.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "common/status.h"
#include "engine/gpu/slab_pool.h"
#include "engine/kv/page_tier.h"
#include "storage/tier_stats.h"

namespace tq::gpu {

class SlabPageTier final : public engine::PageTier {
 public:
  // kind: hot or warm. Slots of SlotStride(max_page_bytes) bytes, as many as budget_bytes holds (at least one).
  static StatusOr<std::unique_ptr<SlabPageTier>> Open(engine::KvTier kind, std::shared_ptr<SlabMemory> memory,
                                                      uint64_t budget_bytes, uint32_t max_page_bytes);

  engine::KvTier kind() const override { return kind_; }
  uint64_t slot_bytes() const override { return SlotStride(max_page_bytes_); }
  uint64_t slot_count() const override { return slots_; }
  uint64_t capacity_bytes() const override { return budget_; }
  uint64_t SlotsFor(uint32_t stored) const override { return stored <= max_page_bytes_ ? 1 : 0; }
  StatusOr<const uint8_t*> Write(engine::PageId id, std::span<const uint8_t> bytes, engine::PrecisionClass cls,
                                 const engine::PageInfo& info) override;
  StatusOr<Slot> Allocate(engine::PageId id, uint32_t length, engine::PrecisionClass cls,
                          const engine::PageInfo& info) override;
  void Free(engine::PageId id) override;
  Status Pin(std::span<const PinRef> pages, std::span<engine::PinnedPage> out) override;
  storage::TierStatsSnapshot io() const override { return stats_.Snapshot(); }
  std::string Describe() const override;

  // Where the page's bytes lie in the tier's memory (a device address for the hot tier); null when absent.
  const uint8_t* Address(engine::PageId id) const override;
  const SlabPool& pool() const { return pool_; }

 private:
  SlabPageTier(engine::KvTier kind, uint64_t budget, uint32_t max_page_bytes, int64_t slots, SlabPool pool)
      : kind_(kind), budget_(budget), max_page_bytes_(max_page_bytes), slots_(slots), pool_(std::move(pool)) {}

  engine::KvTier kind_;
  uint64_t budget_;
  uint32_t max_page_bytes_;
  int64_t slots_;
  SlabPool pool_;
  std::unordered_map<engine::PageId, uint8_t*> slots_of_;  // page -> its slot
  storage::TierStats stats_;
};

}  // namespace tq::gpu
