// The hot and warm tiers on the host as PageTiers: a storage::RamTier arena of one-page slots, read in place.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "engine/kv/page_tier.h"
#include "storage/ram_tier.h"

namespace tq::engine {

class RamPageTier final : public PageTier {
 public:
  // kind: kHot or kWarm. Slots hold max_page_bytes (rounded up to 64); lock: mlock the arena (the warm tier;
  // where the limit refuses it, the tier runs unlocked and says so in Describe).
  static StatusOr<std::unique_ptr<RamPageTier>> Open(KvTier kind, uint64_t budget_bytes, uint32_t max_page_bytes,
                                                     bool lock);

  KvTier kind() const override { return kind_; }
  uint64_t slot_bytes() const override { return ram_->slot_bytes(); }
  uint64_t slot_count() const override { return ram_->slot_count(); }
  uint64_t capacity_bytes() const override { return budget_; }
  uint64_t SlotsFor(uint32_t stored) const override { return stored <= ram_->slot_bytes() ? 1 : 0; }
  StatusOr<const uint8_t*> Write(PageId id, std::span<const uint8_t> bytes, PrecisionClass cls,
                                 const PageInfo& info) override;
  StatusOr<Slot> Allocate(PageId id, uint32_t length, PrecisionClass cls, const PageInfo& info) override;
  const uint8_t* Address(PageId id) const override;
  void Free(PageId id) override;
  Status Pin(std::span<const PinRef> pages, std::span<PinnedPage> out) override;
  storage::TierStatsSnapshot io() const override { return ram_->stats().Snapshot(); }
  std::string Describe() const override;

 private:
  RamPageTier(KvTier kind, uint64_t budget, std::unique_ptr<storage::RamTier> ram)
      : kind_(kind), budget_(budget), ram_(std::move(ram)) {}

  KvTier kind_;
  uint64_t budget_;
  std::unique_ptr<storage::RamTier> ram_;
};

}  // namespace tq::engine
