// The KV manager's page store: full KV pages (one (sequence, layer, KV head) x 128 tokens, K bytes then V bytes)
// placed in the three tiers by precision class, with budgets, fallbacks, prefetch, counters and an event log. It
// owns the page table and the placement policy; the tiers (page_tier.h) only hold bytes.
//
//   class    home tier                       fallbacks (only to tiers whose slots hold the page)
//   HOT      hot  (RAM arena; HBM with CUDA)  warm
//   ACTIVE   warm (host RAM, mlock'd if set)  hot
//   SPARSE   cold (files in cold_dir)         warm, hot       (no cold_dir: warm is SPARSE's home)
//
// A page is metadata here (id, class, tier, length) and bytes in its tier (RamPageTier slots, or the cold store
// behind a ColdPageCache). A cold write that fails (ENOSPC, EIO) is re-homed to a RAM tier by Maintain(); its
// bytes stay readable meanwhile, so nothing is lost and no sequence has to be recomputed for it.
//
// Threading: Store, Release, Maintain and Prefetch are called by the engine thread and never while attention
// runs; Pin may be called from many threads during attention (it only reads the page table, which nothing
// changes then). Stats and events may be read from any thread.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/kv/stats.h"
#include "engine/options.h"
#include "engine/kv/cold_page_tier.h"
#include "engine/kv/page_info.h"
#include "engine/kv/page_tier.h"
#include "engine/kv/precision.h"
#include "kernels/formats/format.h"

namespace tq::engine {

// A page found in the cold tier at start-up, written by an earlier run of the same model and KV layout.
struct RecoveredPage {
  PageId id{};
  PrecisionClass cls = PrecisionClass::kHot;
  PageInfo info;
};

// One entry of the event log that SubscribeKvEvents streams. Sequence numbers start at 1 and have no gaps.
struct KvEvent {
  using Kind = KvEventKind;
  uint64_t seq = 0;
  Kind kind = Kind::kStored;
  PageId page{};
  KvTier tier = KvTier::kHot;  // where the page is (stored, moved) or was (evicted)
  KvTier from = KvTier::kHot;  // moved: where it was
  PrecisionClass cls = PrecisionClass::kHot;
  uint32_t bytes = 0;
  PageInfo info;
  double unix_seconds = 0;
};

class KvPageStore {
 public:
  // class_page_bytes: the largest page (K + V bytes) of each class under the model's layout; 0 for a class
  // with no heads.
  // Makes the hot or warm tier: `budget_bytes` of slots that each hold `slot_bytes`; lock: kv.warm_lock (the warm
  // tier). The default makes host RAM arenas (RamPageTier); on a GPU machine the GPU path passes its device pool
  // (hot) and pinned host pool (warm) (engine/gpu/slab_page_tier.h), so HOT pages live in HBM, ACTIVE ones in
  // pinned memory and SPARSE ones on disk under the same page table and placement.
  using TierMaker = std::function<StatusOr<std::unique_ptr<PageTier>>(KvTier kind, uint64_t budget_bytes,
                                                                       uint32_t slot_bytes, bool lock)>;
  static StatusOr<std::unique_ptr<KvPageStore>> Open(const KvStoreOptions& options,
                                                     std::array<uint32_t, 3> class_page_bytes,
                                                     const TierMaker& make_ram_tier = {});
  ~KvPageStore();

  // Places a copy of a page in its class's home tier or the first fallback with room. resource_exhausted when no
  // tier has a free slot (nothing changes; the caller still has the bytes).
  StatusOr<PageId> Store(PrecisionClass cls, std::span<const uint8_t> bytes, PageInfo info = {});
  // A page of `length` bytes that the caller fills where it lies (the GPU path encodes device pages in place),
  // placed as Store places it among the tiers that hand out slots (not the cold tier). `at` is its address in
  // the tier's memory, valid until the page is released or moved; RamBytes gives it where the CPU may read it.
  struct Allocated {
    PageId id{};
    KvTier tier = KvTier::kHot;
    uint8_t* at = nullptr;
  };
  StatusOr<Allocated> Allocate(PrecisionClass cls, uint32_t length, PageInfo info = {});
  // Reference counting: Store returns a page with one reference; Retain adds one (a sequence sharing a cached
  // prefix, the prefix cache); Release drops one and frees the page at zero.
  void Retain(PageId id);
  void Release(PageId id);
  uint32_t refs(PageId id) const;
  uint32_t PageLength(PageId id) const;  // page bytes (K + V); 0 when absent
  const PageInfo* Info(PageId id) const;  // null when absent
  // Moves a page of the hot or warm tier to the cold tier (durable, frees its slot). False when there is no cold
  // tier, no room, or its bytes could not be read.
  bool MoveToCold(PageId id);
  // Pages recovered from the cold tier at Open (each holds one reference, which the taker owns); once.
  std::vector<RecoveredPage> TakeRecovered();
  // Re-homes cold pages whose write failed. Returns how many moved.
  size_t Maintain();
  // Whether `pages` more pages of each class would fit now (home tiers and fallbacks, whole slots).
  bool Fits(std::array<uint64_t, 3> pages) const;
  // Starts reading the cold ones among `ids` into the cold cache (those not cached nor in flight), in order,
  // while their bytes stay within max_bytes. Returns the bytes of the cold pages taken (read now or before) and
  // whether every cold page of `ids` was.
  struct PrefetchResult {
    uint64_t bytes = 0;
    bool complete = true;
  };
  PrefetchResult Prefetch(std::span<const PageId> ids, uint64_t max_bytes = UINT64_MAX);
  // Bytes of cold pages worth reading ahead of attention: half the cold cache (the rest keeps pages read
  // earlier); 0 without a cold tier.
  uint64_t ReadAheadBytes() const { return cold_ ? cold_->cache().capacity_bytes() / 2 : 0; }

  // Any thread, during attention.
  StatusOr<PinnedPage> Pin(PageId id) const;
  // out[i] = Pin(ids[i]) for all i (out.size() == ids.size()), the cold pages among them fetched from the
  // cold cache in one call (ColdPageCache::GetMany). The first error, where a page could not be pinned.
  Status PinMany(std::span<const PageId> ids, std::span<PinnedPage> out) const;
  // The page's bytes when it lives in a RAM tier (stable until Release), else null (cold: use Pin).
  const uint8_t* RamBytes(PageId id) const;
  // Where the page lies in its tier's memory (PageTier::Address: a device address in a GPU device pool); null
  // when absent or on disk.
  const uint8_t* Address(PageId id) const;
  // The tier holding the page; nullopt when absent.
  std::optional<KvTier> TierOf(PageId id) const;

  KvStoreStats Stats() const;
  bool has_cold_tier() const { return cold_ != nullptr; }
  // Changes when a page leaves the cold cache (ColdPageCache::removals); 0 without a cold tier.
  uint64_t cold_removals() const { return cold_ ? cold_->cache().removals() : 0; }
  // Changes when a page leaves the cold cache or its eviction is blocked by pinned pages
  // (ColdPageCache::removals, blocked_evictions): pages pinned while it holds still may be kept pinned.
  uint64_t cold_hold_epoch() const {
    return cold_ ? cold_->cache().removals() + cold_->cache().blocked_evictions() : 0;
  }
  // Counts cold page reads served from pins kept since the step before (KvStoreStats::cold_held); any thread.
  void CountHeld(uint64_t pages) const { cold_held_.fetch_add(pages, std::memory_order_relaxed); }
  KvTier home(PrecisionClass cls) const { return chain_[static_cast<int>(cls)].front(); }
  // Blocks until queued cold writes are on disk (tests, benchmarks).
  void FlushCold();
  std::string Describe() const;  // "hot 2.0 GiB, warm 2.0 GiB, cold 16.0 GiB in /data (io_uring, O_DIRECT)"

  // Events after `after`, at most `max`; *first_available is the oldest sequence number still held (older ones
  // were dropped from the bounded log). Waits up to timeout_ms for one when none is there.
  std::vector<KvEvent> EventsSince(uint64_t after, size_t max, int timeout_ms, uint64_t* first_available) const;
  uint64_t last_event() const;

 private:
  struct Page {
    PrecisionClass cls;
    KvTier tier;
    uint32_t length;     // page bytes (K + V)
    uint32_t stored;     // bytes its tier keeps for it (PageTier::StoredBytes)
    const uint8_t* ram;  // tiers read in place (RAM): the bytes there; else null
    PageInfo info;
    uint32_t refs = 1;
  };

  KvPageStore() = default;
  PageTier* tier(KvTier t) const { return tiers_[static_cast<int>(t)].get(); }
  // Stored bytes and slots a page of `length` described by `info` takes in tier t; 0 slots when it cannot fit.
  uint64_t SlotsIn(KvTier t, uint32_t length, const PageInfo& info) const;
  // Places bytes in tier t; false when t has no room or refuses the page.
  bool PlaceIn(KvTier t, PageId id, std::span<const uint8_t> bytes, Page* page);
  // Whether tier t is present, admits pages and has free slots for one of `stored` bytes (its StoredBytes).
  bool HasSlots(KvTier t, uint32_t stored) const;
  bool HasRoom(KvTier t, uint32_t length, const PageInfo& info) const;
  // Enters a placed page in the table (counts, event); fallback: it is not in its class's home tier.
  void Insert(PageId id, const Page& page, bool fallback);
  // resource_exhausted for a page of `length` bytes of class cls, counted.
  Status Refuse(PrecisionClass cls, size_t length);
  void Record(KvEvent event);
  void Count(const Page& page, int sign);

  KvStoreOptions options_;
  std::array<std::unique_ptr<PageTier>, kKvTiers> tiers_;  // null: tier absent
  ColdPageTier* cold_ = nullptr;                           // tiers_[kCold] when present
  std::array<std::vector<KvTier>, 3> chain_;  // per class: home, then fallbacks
  std::array<std::array<uint64_t, 3>, kKvTiers> class_slots_{};  // [tier][class]: slots the class's largest page takes

  std::unordered_map<PageId, Page> pages_;  // engine thread writes; attention threads read
  uint64_t next_id_ = 1;
  std::array<std::atomic<uint64_t>, kKvTiers> tier_pages_{}, tier_bytes_{}, tier_slots_{};
  std::array<std::atomic<uint64_t>, 3> class_pages_{}, class_bytes_{};
  std::atomic<uint64_t> fallbacks_{0}, rehomed_{0}, refused_{0};
  mutable std::atomic<uint64_t> cold_held_{0};
  std::string cold_unavailable_;  // why an optional cold tier is off (KvStoreStats::cold_unavailable)
  std::vector<RecoveredPage> recovered_;

  mutable std::mutex events_mu_;
  mutable std::condition_variable events_cv_;
  std::deque<KvEvent> events_;  // the newest kEventLog events
  uint64_t next_event_ = 1;
};

}  // namespace tq::engine
