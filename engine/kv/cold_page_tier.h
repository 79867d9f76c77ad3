// The cold tier as a PageTier: pages in a storage::ColdStore in kv.cold_dir, each written behind its record
// (page_record.h: what the page is, so a restart can rebuild the prefix cache), through a ColdPageCache (one I/O
// thread, a bounded RAM cache attention reads from). Pages are never read in place: Pin returns cached bytes.
//
// At Open it reads back the records an earlier run left: pages of the same model and layout (fingerprint) that a
// prefix names are kept (TakeRecovered), the others erased.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/kv/cold_cache.h"
#include "engine/kv/page_tier.h"
#include "engine/options.h"

namespace tq::engine {

class ColdPageTier final : public PageTier {
 public:
  // largest_page: the largest page (K + V bytes) any class stores; every page fits behind its record.
  static StatusOr<std::unique_ptr<ColdPageTier>> Open(const KvStoreOptions& options, uint32_t largest_page);

  KvTier kind() const override { return KvTier::kCold; }
  uint64_t slot_bytes() const override { return cache_->store().slot_bytes(); }
  uint64_t slot_count() const override { return cache_->store().slot_count(); }
  uint64_t capacity_bytes() const override { return capacity_; }
  uint32_t StoredBytes(uint32_t length, const PageInfo& info) const override;
  uint64_t SlotsFor(uint32_t stored) const override;
  bool admitting() const override { return cache_->admitting(); }
  StatusOr<const uint8_t*> Write(PageId id, std::span<const uint8_t> bytes, PrecisionClass cls,
                                 const PageInfo& info) override;
  void Free(PageId id) override { cache_->Erase(id); }
  void Flush() override { cache_->Flush(); }
  Status Pin(std::span<const PinRef> pages, std::span<PinnedPage> out) override;
  void Prefetch(std::span<const PageId> ids) override;
  std::vector<FailedWrite> TakeFailedWrites() override;
  storage::TierStatsSnapshot io() const override { return cache_->store().stats().Snapshot(); }
  std::string Describe() const override;

  // A page found at Open, written by an earlier run of the same model and KV layout.
  struct Recovered {
    PageId id{};
    PrecisionClass cls = PrecisionClass::kHot;
    PageInfo info;
    uint32_t length = 0;  // page bytes
    uint32_t stored = 0;  // record + page
  };
  // Once.
  std::vector<Recovered> TakeRecovered();

  ColdPageCache& cache() { return *cache_; }
  const ColdPageCache& cache() const { return *cache_; }

 private:
  ColdPageTier() = default;
  // Reads back the pages an earlier run left (Open, before the cache starts its I/O thread).
  void Recover(storage::ColdStore& store);

  KvStoreOptions options_;
  uint64_t capacity_ = 0;
  std::unique_ptr<ColdPageCache> cache_;
  std::vector<Recovered> recovered_;
};

}  // namespace tq::engine
