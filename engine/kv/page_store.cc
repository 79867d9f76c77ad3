#include "engine/kv/page_store.h"

#include "engine/kv/ram_page_tier.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace tq::engine {
namespace {

constexpr size_t kEventLog = 65536;  // events kept for replay

}  // namespace

std::string_view KvTierName(KvTier tier) {
  switch (tier) {
    case KvTier::kHot: return "hot";
    case KvTier::kWarm: return "warm";
    case KvTier::kCold: return "cold";
  }
  return "unknown";
}

std::string_view KvEventKindName(KvEvent::Kind kind) {
  switch (kind) {
    case KvEvent::Kind::kStored: return "stored";
    case KvEvent::Kind::kMoved: return "moved";
    case KvEvent::Kind::kEvicted: return "evicted";
  }
  return "unknown";
}

StatusOr<std::unique_ptr<KvPageStore>> KvPageStore::Open(const KvStoreOptions& options,
                                                         std::array<uint32_t, 3> class_page_bytes,
                                                         const TierMaker& make_ram_tier) {
  if (options.cold_optional && !options.cold_dir.empty()) {
    // The default directory: use it if it works, else run on the RAM tiers and say why.
    KvStoreOptions strict = options;
    strict.cold_optional = false;
    auto with_cold = Open(strict, class_page_bytes, make_ram_tier);
    if (with_cold.ok()) return with_cold;
    KvStoreOptions ram = strict;
    ram.cold_dir.clear();
    TQ_ASSIGN_OR_RETURN(std::unique_ptr<KvPageStore> s, Open(ram, class_page_bytes, make_ram_tier));
    s->cold_unavailable_ = with_cold.status().ToString();
    spdlog::warn("KV cold tier off, every page stays in RAM: {} (kv.cold_dir names another directory; '' turns "
                 "the cold tier off without this warning)", s->cold_unavailable_);
    return s;
  }
  std::unique_ptr<KvPageStore> s(new KvPageStore());
  s->options_ = options;
  const bool cold = !options.cold_dir.empty();
  const KvTier sparse_home = cold ? KvTier::kCold : KvTier::kWarm;
  const std::array<KvTier, 3> home = {KvTier::kHot, KvTier::kWarm, sparse_home};
  const uint32_t largest = *std::max_element(class_page_bytes.begin(), class_page_bytes.end());
  if (largest == 0) {  // only plain f32 layers: nothing will be stored
    for (auto& chain : s->chain_) chain.push_back(KvTier::kHot);
    return s;
  }
  // A RAM tier's slot holds the largest page homed there; a tier no class calls home (and the hot tier, the last
  // resort) takes the largest page of all.
  std::array<uint32_t, 2> slot_bytes{largest, 0};
  for (int c = 0; c < 3; ++c) {
    if (home[c] == KvTier::kWarm) slot_bytes[1] = std::max(slot_bytes[1], class_page_bytes[c]);
  }
  if (slot_bytes[1] == 0) slot_bytes[1] = largest;
  const uint64_t budgets[2] = {options.hot_bytes, options.warm_bytes};
  for (int t = 0; t < 2; ++t) {
    if (budgets[t] == 0) continue;
    const KvTier kind = static_cast<KvTier>(t);
    const bool lock = t == 1 && options.warm_lock;
    if (make_ram_tier) {
      TQ_ASSIGN_OR_RETURN(s->tiers_[t], make_ram_tier(kind, budgets[t], slot_bytes[t], lock));
    } else {
      TQ_ASSIGN_OR_RETURN(s->tiers_[t], RamPageTier::Open(kind, budgets[t], slot_bytes[t], lock));
    }
  }
  if (cold) {
    TQ_ASSIGN_OR_RETURN(std::unique_ptr<ColdPageTier> tier, ColdPageTier::Open(options, largest));
    for (ColdPageTier::Recovered& r : tier->TakeRecovered()) {
      Page page{r.cls, KvTier::kCold, r.length, r.stored, nullptr, r.info, 1};
      s->recovered_.push_back({r.id, r.cls, std::move(r.info)});
      s->pages_.emplace(r.id, std::move(page));
      s->next_id_ = std::max(s->next_id_, Raw(r.id) + 1);
    }
    s->cold_ = tier.get();
    s->tiers_[2] = std::move(tier);
    for (const auto& [id, page] : s->pages_) s->Count(page, +1);
  }
  // Admission counts each class's largest page without a transform in its record (all pages but a head's first).
  for (int t = 0; t < kKvTiers; ++t) {
    for (int c = 0; c < 3; ++c) s->class_slots_[t][c] = s->SlotsIn(static_cast<KvTier>(t), class_page_bytes[c], {});
  }
  const std::array<std::vector<KvTier>, 3> chains = {
      std::vector<KvTier>{KvTier::kHot, KvTier::kWarm},
      std::vector<KvTier>{KvTier::kWarm, KvTier::kHot},
      cold ? std::vector<KvTier>{KvTier::kCold, KvTier::kWarm, KvTier::kHot}
           : std::vector<KvTier>{KvTier::kWarm, KvTier::kHot}};
  for (int c = 0; c < 3; ++c) {
    for (KvTier t : chains[c]) {
      if (s->class_slots_[static_cast<int>(t)][c] > 0) s->chain_[c].push_back(t);
    }
    if (s->chain_[c].empty() && class_page_bytes[c] > 0) {
      return InvalidArgumentError("KV tiers: no tier can hold " + std::string(PrecisionClassName(PrecisionClass(c))) +
                                  " pages (" + std::to_string(class_page_bytes[c]) +
                                  " bytes); give the hot or warm tier a budget");
    }
    if (s->chain_[c].empty()) s->chain_[c].push_back(KvTier::kHot);
  }
  return s;
}

KvPageStore::~KvPageStore() = default;

uint64_t KvPageStore::SlotsIn(KvTier t, uint32_t length, const PageInfo& info) const {
  const PageTier* p = tier(t);
  return p == nullptr ? 0 : p->SlotsFor(p->StoredBytes(length, info));
}

bool KvPageStore::HasSlots(KvTier t, uint32_t stored) const {
  const PageTier* p = tier(t);
  if (p == nullptr || !p->admitting()) return false;
  const uint64_t need = p->SlotsFor(stored);
  return need > 0 && tier_slots_[static_cast<int>(t)].load() + need <= p->slot_count();
}

bool KvPageStore::HasRoom(KvTier t, uint32_t length, const PageInfo& info) const {
  const PageTier* p = tier(t);
  return p != nullptr && HasSlots(t, p->StoredBytes(length, info));
}

bool KvPageStore::PlaceIn(KvTier t, PageId id, std::span<const uint8_t> bytes, Page* page) {
  PageTier* p = tier(t);
  if (p == nullptr) return false;
  const uint32_t length = static_cast<uint32_t>(bytes.size());
  const uint32_t stored = p->StoredBytes(length, page->info);
  if (!HasSlots(t, stored)) return false;
  StatusOr<const uint8_t*> in_place = p->Write(id, bytes, page->cls, page->info);
  if (!in_place.ok()) return false;
  page->tier = t;
  page->length = length;
  page->stored = stored;
  page->ram = *in_place;
  return true;
}

void KvPageStore::Count(const Page& page, int sign) {
  const int t = static_cast<int>(page.tier), c = static_cast<int>(page.cls);
  const uint64_t n = page.length;
  const uint64_t slots = tier(page.tier)->SlotsFor(page.stored);
  if (sign > 0) {
    tier_slots_[t] += slots;
    tier_pages_[t] += 1;
    tier_bytes_[t] += n;
    class_pages_[c] += 1;
    class_bytes_[c] += n;
  } else {
    tier_slots_[t] -= slots;
    tier_pages_[t] -= 1;
    tier_bytes_[t] -= n;
    class_pages_[c] -= 1;
    class_bytes_[c] -= n;
  }
}

void KvPageStore::Insert(PageId id, const Page& page, bool fallback) {
  if (fallback) ++fallbacks_;
  pages_.emplace(id, page);
  Count(page, +1);
  Record({0, KvEvent::Kind::kStored, id, page.tier, page.tier, page.cls, page.length, page.info});
}

Status KvPageStore::Refuse(PrecisionClass cls, size_t length) {
  ++refused_;
  return ResourceExhaustedError("KV tiers are full: no room for a " + std::string(PrecisionClassName(cls)) +
                                " page of " + std::to_string(length) + " bytes");
}

StatusOr<PageId> KvPageStore::Store(PrecisionClass cls, std::span<const uint8_t> bytes, PageInfo info) {
  const PageId id{next_id_++};
  Page page{cls, KvTier::kHot, 0, 0, nullptr, std::move(info), 1};
  const auto& chain = chain_[static_cast<int>(cls)];
  for (size_t i = 0; i < chain.size(); ++i) {
    if (!PlaceIn(chain[i], id, bytes, &page)) continue;
    Insert(id, page, i > 0);
    return id;
  }
  return Refuse(cls, bytes.size());
}

StatusOr<KvPageStore::Allocated> KvPageStore::Allocate(PrecisionClass cls, uint32_t length, PageInfo info) {
  const PageId id{next_id_++};
  Page page{cls, KvTier::kHot, length, 0, nullptr, std::move(info), 1};
  const auto& chain = chain_[static_cast<int>(cls)];
  for (size_t i = 0; i < chain.size(); ++i) {
    const KvTier t = chain[i];
    PageTier* p = tier(t);
    if (p == nullptr) continue;
    const uint32_t stored = p->StoredBytes(length, page.info);
    if (!HasSlots(t, stored)) continue;
    StatusOr<PageTier::Slot> slot = p->Allocate(id, length, cls, page.info);
    if (!slot.ok()) continue;  // the cold tier: written from bytes only
    page.tier = t;
    page.stored = stored;
    page.ram = slot->host;
    Insert(id, page, i > 0);
    return Allocated{id, t, slot->at};
  }
  return Refuse(cls, length);
}

void KvPageStore::Retain(PageId id) {
  auto it = pages_.find(id);
  if (it != pages_.end()) ++it->second.refs;
}

const PageInfo* KvPageStore::Info(PageId id) const {
  auto it = pages_.find(id);
  return it == pages_.end() ? nullptr : &it->second.info;
}

uint32_t KvPageStore::PageLength(PageId id) const {
  auto it = pages_.find(id);
  return it == pages_.end() ? 0 : it->second.length;
}

uint32_t KvPageStore::refs(PageId id) const {
  auto it = pages_.find(id);
  return it == pages_.end() ? 0 : it->second.refs;
}

void KvPageStore::Release(PageId id) {
  auto it = pages_.find(id);
  if (it == pages_.end()) return;
  if (--it->second.refs > 0) return;
  const Page page = it->second;
  tier(page.tier)->Free(id);
  Count(page, -1);
  pages_.erase(it);
  Record({0, KvEvent::Kind::kEvicted, id, page.tier, page.tier, page.cls, page.length, page.info});
}

size_t KvPageStore::Maintain() {
  size_t moved = 0;
  for (const auto& from_tier : tiers_) {
    if (from_tier == nullptr) continue;
    for (PageTier::FailedWrite& f : from_tier->TakeFailedWrites()) {
      const PageId id = f.id;
      auto it = pages_.find(id);
      if (it == pages_.end() || it->second.tier != from_tier->kind()) continue;  // released or moved meanwhile
      Page& page = it->second;
      std::span<const uint8_t> bytes(f.stored->data() + (f.stored->size() - page.length), page.length);
      Page moved_to = page;
      bool placed = false;
      for (KvTier t : chain_[static_cast<int>(page.cls)]) {
        if (t != page.tier && PlaceIn(t, id, bytes, &moved_to)) {
          placed = true;
          break;
        }
      }
      if (!placed) {
        // No room elsewhere: the bytes stay pinned in the tier (the cold cache, over its budget) until the page
        // is released; the scheduler sees the tiers full and preempts.
        spdlog::warn("KV {} tier: write of page {} failed ({}) and no other tier has room; kept in its cache",
                     KvTierName(page.tier), Raw(id), f.status.ToString());
        continue;
      }
      spdlog::warn("KV {} tier: write of page {} failed ({}); moved to the {} tier", KvTierName(page.tier), Raw(id),
                   f.status.ToString(), KvTierName(moved_to.tier));
      Count(page, -1);
      const KvTier from = page.tier;
      page = moved_to;
      Count(page, +1);
      from_tier->Free(f.id);
      ++rehomed_;
      ++moved;
      Record({0, KvEvent::Kind::kMoved, id, page.tier, from, page.cls, page.length, page.info});
    }
  }
  return moved;
}

bool KvPageStore::Fits(std::array<uint64_t, 3> pages) const {
  std::array<uint64_t, kKvTiers> free{};  // slots
  for (int t = 0; t < kKvTiers; ++t) {
    const PageTier* p = tiers_[t].get();
    const uint64_t used = tier_slots_[t].load();
    free[t] = p != nullptr && p->admitting() && p->slot_count() > used ? p->slot_count() - used : 0;
  }
  // Each class first takes slots in its home tier, then what is left anywhere along its chain. A RAM page takes
  // one slot, a cold page the 4 KiB slots its bytes need.
  std::array<uint64_t, 3> need = pages;
  for (int pass = 0; pass < 2; ++pass) {
    for (int c = 0; c < 3; ++c) {
      const auto& chain = chain_[c];
      for (size_t i = 0; i < (pass == 0 ? 1 : chain.size()) && need[c] > 0; ++i) {
        const int t = static_cast<int>(chain[i]);
        const uint64_t cost = class_slots_[t][c];
        if (cost == 0) continue;
        uint64_t& f = free[t];
        const uint64_t take = std::min(need[c], f / cost);
        f -= take * cost;
        need[c] -= take;
      }
    }
  }
  for (uint64_t n : need) {
    if (n > 0) return false;
  }
  return true;
}

KvPageStore::PrefetchResult KvPageStore::Prefetch(std::span<const PageId> ids, uint64_t max_bytes) {
  PrefetchResult r;
  if (!cold_) return r;
  thread_local std::vector<PageId> cold_ids;
  cold_ids.clear();
  for (PageId id : ids) {
    auto it = pages_.find(id);
    if (it == pages_.end() || it->second.tier != KvTier::kCold) continue;
    const uint64_t bytes = it->second.stored;
    if (r.bytes + bytes > max_bytes) {
      r.complete = false;
      break;
    }
    cold_ids.push_back(id);
    r.bytes += bytes;
  }
  if (!cold_ids.empty()) cold_->Prefetch(cold_ids);
  return r;
}

StatusOr<PinnedPage> KvPageStore::Pin(PageId id) const {
  PinnedPage pin;
  TQ_RETURN_IF_ERROR(PinMany(std::span<const PageId>(&id, 1), std::span<PinnedPage>(&pin, 1)));
  return pin;
}

Status KvPageStore::PinMany(std::span<const PageId> ids, std::span<PinnedPage> out) const {
  // The pages not read in place, by tier: their references and positions in ids (pages_ does not change during
  // attention, so what is found here stays valid).
  thread_local std::array<std::vector<PageTier::PinRef>, kKvTiers> refs;
  thread_local std::array<std::vector<size_t>, kKvTiers> index;
  thread_local std::vector<PinnedPage> pinned;
  bool any = false;
  for (int t = 0; t < kKvTiers; ++t) {
    refs[t].clear();
    index[t].clear();
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = pages_.find(ids[i]);
    if (it == pages_.end())
      return InternalError("KV page " + std::to_string(Raw(ids[i])) + " is not in the store");
    const Page& page = it->second;
    if (page.ram != nullptr) {
      out[i] = PinnedPage{page.ram, nullptr};
      continue;
    }
    const int t = static_cast<int>(page.tier);
    refs[t].push_back({ids[i], page.stored, page.length});
    index[t].push_back(i);
    any = true;
  }
  if (!any) return Status::Ok();
  for (int t = 0; t < kKvTiers; ++t) {
    if (refs[t].empty()) continue;
    pinned.assign(refs[t].size(), PinnedPage{});
    Status status = tiers_[t]->Pin(refs[t], pinned);
    for (size_t j = 0; j < pinned.size(); ++j) out[index[t][j]] = std::move(pinned[j]);
    pinned.clear();  // the holds are in out now
    TQ_RETURN_IF_ERROR(status);
  }
  return Status::Ok();
}

const uint8_t* KvPageStore::RamBytes(PageId id) const {
  auto it = pages_.find(id);
  return it == pages_.end() ? nullptr : it->second.ram;
}

const uint8_t* KvPageStore::Address(PageId id) const {
  auto it = pages_.find(id);
  return it == pages_.end() ? nullptr : tier(it->second.tier)->Address(id);
}

std::optional<KvTier> KvPageStore::TierOf(PageId id) const {
  auto it = pages_.find(id);
  if (it == pages_.end()) return std::nullopt;
  return it->second.tier;
}

bool KvPageStore::MoveToCold(PageId id) {
  auto it = pages_.find(id);
  if (it == pages_.end() || it->second.tier == KvTier::kCold || !cold_) return false;
  Page& page = it->second;
  Page moved_to = page;
  // RAM pages are read in place; device pages are copied out by their tier.
  PinnedPage pin{page.ram, nullptr};
  if (pin.data == nullptr) {
    const PageTier::PinRef ref{id, page.stored, page.length};
    if (!tier(page.tier)->Pin(std::span<const PageTier::PinRef>(&ref, 1), std::span<PinnedPage>(&pin, 1)).ok()) {
      return false;
    }
  }
  if (!PlaceIn(KvTier::kCold, id, std::span<const uint8_t>(pin.data, page.length), &moved_to)) return false;
  const KvTier from = page.tier;
  tier(from)->Free(id);
  Count(page, -1);
  page = moved_to;
  Count(page, +1);
  Record({0, KvEvent::Kind::kMoved, id, page.tier, from, page.cls, page.length, page.info});
  return true;
}

std::vector<RecoveredPage> KvPageStore::TakeRecovered() {
  std::vector<RecoveredPage> out;
  out.swap(recovered_);
  return out;
}

void KvPageStore::FlushCold() {
  for (const auto& t : tiers_) {
    if (t != nullptr) t->Flush();
  }
}

KvStoreStats KvPageStore::Stats() const {
  KvStoreStats s;
  for (int t = 0; t < kKvTiers; ++t) {
    KvTierUsage& u = s.tiers[t];
    const PageTier* p = tiers_[t].get();
    u.present = p != nullptr;
    if (!u.present) continue;
    u.pages = tier_pages_[t].load();
    u.slots_used = tier_slots_[t].load();
    u.bytes = tier_bytes_[t].load();
    u.slot_bytes = p->slot_bytes();
    u.slots = p->slot_count();
    u.capacity_bytes = p->capacity_bytes();
    u.io = p->io();
  }
  for (int c = 0; c < 3; ++c) {
    s.class_pages[c] = class_pages_[c].load();
    s.class_bytes[c] = class_bytes_[c].load();
  }
  if (cold_) s.cold_cache = cold_->cache().stats();
  s.fallbacks = fallbacks_.load();
  s.rehomed = rehomed_.load();
  s.refused = refused_.load();
  s.cold_held = cold_held_.load();
  s.cold_unavailable = cold_unavailable_;
  return s;
}

std::string KvPageStore::Describe() const {
  std::string out;
  for (int t = 0; t < kKvTiers; ++t) {
    if (t > 0) out += ", ";
    if (tiers_[t] != nullptr) {
      out += tiers_[t]->Describe();
    } else {
      out += "no " + std::string(KvTierName(static_cast<KvTier>(t))) + " tier";
      if (t == 2 && !cold_unavailable_.empty()) out += " (unavailable: " + cold_unavailable_ + ")";
    }
  }
  return out;
}

void KvPageStore::Record(KvEvent event) {
  event.unix_seconds =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  {
    std::lock_guard<std::mutex> lock(events_mu_);
    event.seq = next_event_++;
    events_.push_back(event);
    if (events_.size() > kEventLog) events_.pop_front();
  }
  events_cv_.notify_all();
}

uint64_t KvPageStore::last_event() const {
  std::lock_guard<std::mutex> lock(events_mu_);
  return next_event_ - 1;
}

std::vector<KvEvent> KvPageStore::EventsSince(uint64_t after, size_t max, int timeout_ms,
                                              uint64_t* first_available) const {
  std::unique_lock<std::mutex> lock(events_mu_);
  if (timeout_ms > 0) {
    events_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return next_event_ - 1 > after; });
  }
  std::vector<KvEvent> out;
  const uint64_t first = events_.empty() ? next_event_ : events_.front().seq;
  if (first_available) *first_available = first;
  const uint64_t start = std::max(after + 1, first);
  for (uint64_t s = start; s < next_event_ && out.size() < max; ++s) out.push_back(events_[s - first]);
  return out;
}

}  // namespace tq::engine
