// One tier of KV page memory, as the page store (page_store.h) places pages in it. The store keeps the page table
// and the placement policy (class -> home tier, fallbacks, budgets); a tier only holds bytes:
//
//   RamPageTier  (ram_page_tier.h)   hot and warm on the host: a slot arena; pages are read in place.
//   ColdPageTier (cold_page_tier.h)  files in kv.cold_dir through io_uring, each page behind its record
//                                    (page_record.h), written and read by an I/O thread through a bounded cache.
//   gpu::SlabPageTier                hot and warm on a GPU machine: slots in device memory (HBM) or pinned host
//     (engine/gpu/slab_page_tier.h)  memory; device pages are pinned through a copy (the store never includes it:
//                                    the GPU path hands it in, KvPageStore::TierMaker).
//
// Sizes: a page's `length` is its K + V bytes; a tier may keep more for it (StoredBytes: the cold tier's record).
// Capacity is counted in slots of slot_bytes(); a page takes SlotsFor(stored) of them, 0 when it can never fit.
// The store counts slots used; a tier refuses a Write only when it cannot place the bytes.
//
// Threading: the store's thread (the engine's) calls everything but Pin, which attention threads call
// concurrently while nothing else runs; io() any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/kv/page_info.h"
#include "engine/kv/precision.h"
#include "engine/kv/stats.h"
#include "storage/tier_stats.h"

namespace tq::engine {

class PageTier {
 public:
  virtual ~PageTier() = default;

  virtual KvTier kind() const = 0;
  virtual uint64_t slot_bytes() const = 0;
  virtual uint64_t slot_count() const = 0;
  virtual uint64_t capacity_bytes() const = 0;  // the budget the tier holds to (slot_count() * slot_bytes() or less)

  // Bytes the tier keeps for a page of `length` bytes described by `info`.
  virtual uint32_t StoredBytes(uint32_t length, const PageInfo& info) const {
    (void)info;
    return length;
  }
  // Slots `stored` bytes take; 0 when they never fit in this tier.
  virtual uint64_t SlotsFor(uint32_t stored) const = 0;
  // False while the tier takes no new pages (the cold tier after the disk refused space).
  virtual bool admitting() const { return true; }

  // Write from: places a copy of `bytes` (the page, `length` bytes) under `id`. Returns the page's bytes in
  // place when the CPU reads them there (stable until Free), else null. resource_exhausted when there is no slot;
  // then nothing changes.
  virtual StatusOr<const uint8_t*> Write(PageId id, std::span<const uint8_t> bytes, PrecisionClass cls,
                                         const PageInfo& info) = 0;
  // Allocate: a slot under `id` for a page of `length` bytes that the caller fills where it lies (the GPU encoder
  // writes device pages in place). `at` is the address in the tier's memory; `host` the same address where the
  // CPU may read it, else null. resource_exhausted when there is no slot; unimplemented for a tier written only
  // from bytes (cold).
  struct Slot {
    uint8_t* at = nullptr;
    const uint8_t* host = nullptr;
  };
  virtual StatusOr<Slot> Allocate(PageId id, uint32_t length, PrecisionClass cls, const PageInfo& info) {
    (void)id, (void)length, (void)cls, (void)info;
    return UnimplementedError("KV " + std::string(KvTierName(kind())) + " tier: pages are written from bytes");
  }
  // Where the page lies in the tier's memory (a device address in a device pool); null when absent or not
  // addressable (the cold tier).
  virtual const uint8_t* Address(PageId id) const {
    (void)id;
    return nullptr;
  }
  // Drops the page (an unknown id is ignored).
  virtual void Free(PageId id) = 0;
  // Blocks until every write returned so far is done (on disk for the cold tier).
  virtual void Flush() {}

  // Read into: out[i] holds the `length` bytes of pages[i] (out.size() == pages.size()), kept alive by its hold
  // while the caller keeps it. The first error where a page could not be read (data_loss, io_error, not_found).
  struct PinRef {
    PageId id{};
    uint32_t stored = 0;  // StoredBytes of the page, as the store recorded it
    uint32_t length = 0;
  };
  virtual Status Pin(std::span<const PinRef> pages, std::span<PinnedPage> out) = 0;
  // Starts reading pages ahead of Pin, in order (tiers behind a cache); the others ignore it.
  virtual void Prefetch(std::span<const PageId> ids) { (void)ids; }

  // Writes that failed after Write returned (a cold write meets ENOSPC or EIO), oldest first. Their stored bytes
  // (the page is the last `length` of them) stay readable until the store frees the page.
  struct FailedWrite {
    PageId id{};
    PageBytes stored;
    Status status;
  };
  virtual std::vector<FailedWrite> TakeFailedWrites() { return {}; }

  virtual storage::TierStatsSnapshot io() const = 0;
  // "hot 2.0 GiB", "warm 2.0 GiB (locked)", "cold 16.0 GiB in /data (io_uring, O_DIRECT; cache 1.0 GiB)".
  virtual std::string Describe() const = 0;
};

// "2.0 GiB".
std::string GiB(uint64_t bytes);

}  // namespace tq::engine
