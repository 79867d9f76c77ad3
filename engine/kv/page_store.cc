#include "engine/kv/page_store.h"

#include "engine/kv/page_record.h"
#include "storage/page_format.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace tq::engine {
namespace {

constexpr size_t kEventLog = 65536;  // events kept for replay

// The bytes a cold page is written as: its record, then the page.
PageBuffer WithRecord(const PageInfo& info, PrecisionClass cls, uint64_t fingerprint,
                      std::span<const uint8_t> page, uint32_t* record_bytes) {
  PageRecord r;
  r.layout_fingerprint = fingerprint;
  r.prefix_hash = info.prefix_hash;
  r.parent_hash = info.parent_hash;
  r.page_index = info.page_index;
  r.layer = info.layer;
  r.kv_head = info.kv_head;
  r.cls = cls;
  r.k = info.k;
  r.v = info.v;
  r.transform = info.transform;
  *record_bytes = RecordBytes(TransformFloats(r.transform));
  PageBuffer out(*record_bytes + page.size());
  EncodeRecord(r, out);
  std::memcpy(out.data() + *record_bytes, page.data(), page.size());
  return out;
}

std::string GiB(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1u << 30));
  return buf;
}

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
                                                         std::array<uint32_t, 3> class_page_bytes) {
  if (options.cold_optional && !options.cold_dir.empty()) {
    // The default directory: use it if it works, else run on the RAM tiers and say why.
    KvStoreOptions strict = options;
    strict.cold_optional = false;
    auto with_cold = Open(strict, class_page_bytes);
    if (with_cold.ok()) return with_cold;
    KvStoreOptions ram = strict;
    ram.cold_dir.clear();
    TQ_ASSIGN_OR_RETURN(std::unique_ptr<KvPageStore> s, Open(ram, class_page_bytes));
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
  // A tier's slot holds the largest page homed there; a tier no class calls home (and the hot tier, the last
  // resort) takes the largest page of all.
  for (int c = 0; c < 3; ++c) {
    const int t = static_cast<int>(home[c]);
    s->slot_bytes_[t] = std::max<uint64_t>(s->slot_bytes_[t], class_page_bytes[c]);
  }
  s->slot_bytes_[0] = largest;
  if (s->slot_bytes_[1] == 0) s->slot_bytes_[1] = largest;
  const uint64_t budgets[2] = {options.hot_bytes, options.warm_bytes};
  for (int t = 0; t < 2; ++t) {
    if (budgets[t] == 0) continue;
    storage::RamTierOptions ro;
    ro.name = std::string(KvTierName(static_cast<KvTier>(t)));
    ro.capacity_bytes = budgets[t];
    ro.max_page_bytes = static_cast<uint32_t>(s->slot_bytes_[t]);
    ro.lock_memory = t == 1 && options.warm_lock;
    auto tier = storage::RamTier::Open(ro);
    if (!tier.ok()) return tier.status().WithContext("KV " + ro.name + " tier");
    s->ram_[t] = std::move(*tier);
    s->slot_bytes_[t] = s->ram_[t]->slot_bytes();
    s->slots_[t] = s->ram_[t]->slot_count();
  }
  if (cold) {
    storage::ColdStoreOptions co;
    co.cold_dir = options.cold_dir;
    co.capacity_bytes = options.cold_bytes;
    // Any page may move to the cold tier (the prefix cache keeps finished sequences there), behind its record.
    // Slots are 4 KiB: a page takes the slots its bytes need, and a sequence's (layer, KV head) pages lie back
    // to back on disk (PageInfo::stream), so reading them is a few large reads.
    co.max_page_bytes = largest + RecordBytes(kTransformParts * options.head_dim);
    co.slot_payload_bytes = static_cast<uint32_t>(storage::kIoAlignment) - storage::kPageHeaderBytes;
    co.direct_io = options.direct_io;
    co.io.backend = options.io_backend;
    co.io.queue_depth = options.io_depth;
    std::unique_ptr<storage::IoQueue> queue;
    if (options.wrap_queue) {
      TQ_ASSIGN_OR_RETURN(auto inner, storage::MakeIoQueue(co.io));
      queue = options.wrap_queue(std::move(inner));
    }
    auto store = storage::ColdStore::Open(co, std::move(queue));
    if (!store.ok() && store.status().code() == StatusCode::kFailedPrecondition && !options.wrap_queue) {
      // Files of another configuration (another slot size): a cache, not data; start the tier afresh.
      spdlog::warn("KV cold tier: {}; removing its files and starting empty", store.status().message());
      TQ_RETURN_IF_ERROR(storage::RemoveColdFiles(options.cold_dir));
      store = storage::ColdStore::Open(co);
    }
    if (!store.ok()) return store.status().WithContext("KV cold tier in " + options.cold_dir);
    s->slot_bytes_[2] = (*store)->slot_bytes();
    s->slots_[2] = (*store)->slot_count();
    // The store caps its budget to the room its file system has (a warning says so): report what it holds.
    s->options_.cold_bytes = std::min(s->options_.cold_bytes, s->slots_[2] * s->slot_bytes_[2]);
    TQ_RETURN_IF_ERROR(s->Recover(**store));
    // Admission counts pages without a transform in their record (all but a head's first).
    for (int c = 0; c < 3; ++c) s->cold_page_slots_[c] = (*store)->SlotsFor(class_page_bytes[c] + RecordBytes(0));
    s->cold_ = std::make_unique<ColdPageCache>(std::move(*store), options.cold_cache_bytes);
  }
  const std::array<std::vector<KvTier>, 3> chains = {
      std::vector<KvTier>{KvTier::kHot, KvTier::kWarm},
      std::vector<KvTier>{KvTier::kWarm, KvTier::kHot},
      cold ? std::vector<KvTier>{KvTier::kCold, KvTier::kWarm, KvTier::kHot}
           : std::vector<KvTier>{KvTier::kWarm, KvTier::kHot}};
  for (int c = 0; c < 3; ++c) {
    for (KvTier t : chains[c]) {
      const int ti = static_cast<int>(t);
      const bool present = ti == 2 ? s->cold_ != nullptr : s->ram_[ti] != nullptr;
      // A cold page takes as many slots as it needs (up to the store's max_page_bytes, the largest page).
      if (present && (ti == 2 || s->slot_bytes_[ti] >= class_page_bytes[c])) s->chain_[c].push_back(t);
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

uint64_t KvPageStore::SlotsOf(KvTier t, uint32_t bytes) const {
  if (t != KvTier::kCold) return 1;
  return storage::SlotsFor(bytes, static_cast<uint32_t>(slot_bytes_[2]));
}

bool KvPageStore::HasRoom(KvTier t, uint32_t length, const PageInfo& info) const {
  const int ti = static_cast<int>(t);
  if (t != KvTier::kCold && length > slot_bytes_[ti]) return false;
  if (t == KvTier::kCold) {
    if (cold_ == nullptr || !cold_->admitting()) return false;
    const uint64_t need = SlotsOf(t, length + RecordBytes(TransformFloats(info.transform)));
    return tier_slots_[ti].load() + need <= slots_[ti];
  }
  return ram_[ti] != nullptr && tier_pages_[ti].load() < slots_[ti];
}

bool KvPageStore::PlaceIn(KvTier t, uint64_t id, std::span<const uint8_t> bytes, Page* page) {
  if (!HasRoom(t, static_cast<uint32_t>(bytes.size()), page->info)) return false;
  const int ti = static_cast<int>(t);
  page->tier = t;
  page->length = static_cast<uint32_t>(bytes.size());
  page->ram = nullptr;
  if (t == KvTier::kCold) {
    cold_->Write(id, WithRecord(page->info, page->cls, options_.fingerprint, bytes, &page->record),
                 page->info.stream);
    return true;
  }
  auto slot = ram_[ti]->Allocate(id, page->length);
  if (!slot.ok()) return false;
  std::memcpy(slot->data(), bytes.data(), bytes.size());
  page->ram = reinterpret_cast<const uint8_t*>(slot->data());
  return true;
}

void KvPageStore::Count(const Page& page, int sign) {
  const int t = static_cast<int>(page.tier), c = static_cast<int>(page.cls);
  const uint64_t n = page.length;
  const uint64_t slots = SlotsOf(page.tier, page.record + page.length);
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

StatusOr<uint64_t> KvPageStore::Store(PrecisionClass cls, std::span<const uint8_t> bytes, PageInfo info) {
  const uint64_t id = next_id_++;
  Page page{cls, KvTier::kHot, 0, nullptr, std::move(info), 1, 0};
  const auto& chain = chain_[static_cast<int>(cls)];
  for (size_t i = 0; i < chain.size(); ++i) {
    if (!PlaceIn(chain[i], id, bytes, &page)) continue;
    if (i > 0) ++fallbacks_;
    pages_.emplace(id, page);
    Count(page, +1);
    Record({0, KvEvent::Kind::kStored, id, page.tier, page.tier, cls, page.length, page.info});
    return id;
  }
  ++refused_;
  return ResourceExhaustedError("KV tiers are full: no room for a " + std::string(PrecisionClassName(cls)) +
                                " page of " + std::to_string(bytes.size()) + " bytes");
}

void KvPageStore::Retain(uint64_t id) {
  auto it = pages_.find(id);
  if (it != pages_.end()) ++it->second.refs;
}

const PageInfo* KvPageStore::Info(uint64_t id) const {
  auto it = pages_.find(id);
  return it == pages_.end() ? nullptr : &it->second.info;
}

uint32_t KvPageStore::PageLength(uint64_t id) const {
  auto it = pages_.find(id);
  return it == pages_.end() ? 0 : it->second.length;
}

uint32_t KvPageStore::refs(uint64_t id) const {
  auto it = pages_.find(id);
  return it == pages_.end() ? 0 : it->second.refs;
}

void KvPageStore::Release(uint64_t id) {
  auto it = pages_.find(id);
  if (it == pages_.end()) return;
  if (--it->second.refs > 0) return;
  const Page page = it->second;
  if (page.tier == KvTier::kCold) {
    cold_->Erase(id);
  } else {
    ram_[static_cast<int>(page.tier)]->Erase(id).IgnoreError();
  }
  Count(page, -1);
  pages_.erase(it);
  Record({0, KvEvent::Kind::kEvicted, id, page.tier, page.tier, page.cls, page.length, page.info});
}

size_t KvPageStore::Maintain() {
  if (!cold_) return 0;
  size_t moved = 0;
  for (ColdPageCache::FailedWrite& f : cold_->TakeFailedWrites()) {
    auto it = pages_.find(f.id);
    if (it == pages_.end() || it->second.tier != KvTier::kCold) continue;  // released meanwhile
    Page& page = it->second;
    std::vector<uint8_t> bytes(f.bytes->begin() + page.record, f.bytes->end());
    Page moved_to = page;
    bool placed = false;
    for (KvTier t : chain_[static_cast<int>(page.cls)]) {
      if (t != KvTier::kCold && PlaceIn(t, f.id, bytes, &moved_to)) {
        placed = true;
        break;
      }
    }
    if (!placed) {
      // No RAM either: the bytes stay pinned in the cold cache (over its budget) until the page is released;
      // the scheduler sees the tiers full and preempts.
      spdlog::warn("KV cold tier: write of page {} failed ({}) and no RAM tier has room; kept in the cold cache",
                   f.id, f.status.ToString());
      continue;
    }
    spdlog::warn("KV cold tier: write of page {} failed ({}); moved to the {} tier", f.id, f.status.ToString(),
                 KvTierName(moved_to.tier));
    Count(page, -1);
    const KvTier from = page.tier;
    page = moved_to;
    Count(page, +1);
    cold_->Erase(f.id);
    ++rehomed_;
    ++moved;
    Record({0, KvEvent::Kind::kMoved, f.id, page.tier, from, page.cls, page.length, page.info});
  }
  return moved;
}

bool KvPageStore::Fits(std::array<uint64_t, 3> pages) const {
  std::array<uint64_t, kKvTiers> free{};  // slots
  for (int t = 0; t < kKvTiers; ++t) {
    const bool present = t == 2 ? (cold_ != nullptr && cold_->admitting()) : ram_[t] != nullptr;
    const uint64_t used = tier_slots_[t].load();
    free[t] = present && slots_[t] > used ? slots_[t] - used : 0;
  }
  // Each class first takes slots in its home tier, then what is left anywhere along its chain. A RAM page takes
  // one slot, a cold page the 4 KiB slots its bytes need.
  std::array<uint64_t, 3> need = pages;
  for (int pass = 0; pass < 2; ++pass) {
    for (int c = 0; c < 3; ++c) {
      const auto& chain = chain_[c];
      for (size_t i = 0; i < (pass == 0 ? 1 : chain.size()) && need[c] > 0; ++i) {
        const int t = static_cast<int>(chain[i]);
        const uint64_t cost = t == 2 ? cold_page_slots_[c] : 1;
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

KvPageStore::PrefetchResult KvPageStore::Prefetch(std::span<const uint64_t> ids, uint64_t max_bytes) {
  PrefetchResult r;
  if (!cold_) return r;
  thread_local std::vector<uint64_t> cold_ids;
  cold_ids.clear();
  for (uint64_t id : ids) {
    auto it = pages_.find(id);
    if (it == pages_.end() || it->second.tier != KvTier::kCold) continue;
    const uint64_t bytes = it->second.record + it->second.length;
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

StatusOr<PinnedPage> KvPageStore::Pin(uint64_t id) const {
  PinnedPage pin;
  TQ_RETURN_IF_ERROR(PinMany(std::span<const uint64_t>(&id, 1), std::span<PinnedPage>(&pin, 1)));
  return pin;
}

Status KvPageStore::PinMany(std::span<const uint64_t> ids, std::span<PinnedPage> out) const {
  // The cold ones among ids: their ids, positions in ids and store entries (pages_ does not change during
  // attention, so the entries found here stay valid).
  thread_local std::vector<uint64_t> cold_ids;
  thread_local std::vector<size_t> cold_index;
  thread_local std::vector<const Page*> cold_pages;
  thread_local std::vector<PageBytes> cold_bytes;
  cold_ids.clear();
  cold_index.clear();
  cold_pages.clear();
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = pages_.find(ids[i]);
    if (it == pages_.end())
      return InternalError("KV page " + std::to_string(ids[i]) + " is not in the store");
    if (it->second.ram != nullptr) {
      out[i] = PinnedPage{it->second.ram, nullptr};
      continue;
    }
    cold_ids.push_back(ids[i]);
    cold_index.push_back(i);
    cold_pages.push_back(&it->second);
  }
  if (cold_ids.empty()) return Status::Ok();
  cold_bytes.assign(cold_ids.size(), nullptr);
  Status status = cold_->GetMany(cold_ids, cold_bytes);
  for (size_t j = 0; j < cold_ids.size() && status.ok(); ++j) {
    const Page& page = *cold_pages[j];
    const PageBytes& bytes = cold_bytes[j];
    if (bytes->size() != page.record + page.length) {
      status = DataLossError("KV page " + std::to_string(cold_ids[j]) + " read back with " +
                             std::to_string(bytes->size()) + " bytes, not " +
                             std::to_string(page.record + page.length));
      break;
    }
    out[cold_index[j]] = PinnedPage{bytes->data() + page.record, bytes};
  }
  cold_bytes.clear();  // the holds are in out now
  return status;
}

const uint8_t* KvPageStore::RamBytes(uint64_t id) const {
  auto it = pages_.find(id);
  return it == pages_.end() ? nullptr : it->second.ram;
}

bool KvPageStore::MoveToCold(uint64_t id) {
  auto it = pages_.find(id);
  if (it == pages_.end() || it->second.ram == nullptr || !cold_) return false;
  Page& page = it->second;
  if (!HasRoom(KvTier::kCold, page.length, page.info)) return false;
  const KvTier from = page.tier;
  std::vector<uint8_t> bytes(page.ram, page.ram + page.length);
  Count(page, -1);
  ram_[static_cast<int>(from)]->Erase(id).IgnoreError();
  page.tier = KvTier::kCold;
  page.ram = nullptr;
  cold_->Write(id, WithRecord(page.info, page.cls, options_.fingerprint, bytes, &page.record), page.info.stream);
  Count(page, +1);
  Record({0, KvEvent::Kind::kMoved, id, page.tier, from, page.cls, page.length, page.info});
  return true;
}

std::vector<RecoveredPage> KvPageStore::TakeRecovered() {
  std::vector<RecoveredPage> out;
  out.swap(recovered_);
  return out;
}

Status KvPageStore::Recover(storage::ColdStore& store) {
  std::vector<uint8_t> buf(store.max_page_bytes());
  uint64_t kept = 0, dropped = 0;
  for (uint64_t id : store.PageIds()) {
    StatusOr<uint32_t> n = store.Read(id, std::as_writable_bytes(std::span<uint8_t>(buf)));
    uint32_t record_bytes = 0;
    StatusOr<PageRecord> r =
        n.ok() ? DecodeRecord(std::span<const uint8_t>(buf.data(), *n), &record_bytes) : StatusOr<PageRecord>(n.status());
    if (!r.ok() || options_.fingerprint == 0 || r->layout_fingerprint != options_.fingerprint ||
        r->prefix_hash == 0) {
      // Another model or layout, an unreadable page, or a page no prefix names: not trusted, not kept.
      store.Erase(id).IgnoreError();
      ++dropped;
      continue;
    }
    Page page{r->cls, KvTier::kCold, *n - record_bytes, nullptr, {}, 1, record_bytes};
    page.info = {"", r->layer, r->kv_head, 0, r->k, r->v, r->prefix_hash, r->parent_hash, r->page_index,
                 std::move(r->transform)};
    recovered_.push_back({id, page.cls, page.info});
    pages_.emplace(id, page);
    Count(page, +1);
    next_id_ = std::max(next_id_, id + 1);
    ++kept;
  }
  if (kept + dropped > 0) {
    spdlog::info("KV cold tier: {} pages of an earlier run kept for the prefix cache, {} dropped", kept, dropped);
  }
  return Status::Ok();
}

void KvPageStore::FlushCold() {
  if (cold_) cold_->Flush();
}

KvStoreStats KvPageStore::Stats() const {
  KvStoreStats s;
  for (int t = 0; t < kKvTiers; ++t) {
    KvTierUsage& u = s.tiers[t];
    u.present = t == 2 ? cold_ != nullptr : ram_[t] != nullptr;
    if (!u.present) continue;
    u.pages = tier_pages_[t].load();
    u.slots_used = tier_slots_[t].load();
    u.bytes = tier_bytes_[t].load();
    u.slot_bytes = slot_bytes_[t];
    u.slots = slots_[t];
    u.capacity_bytes = t == 2 ? options_.cold_bytes : (t == 0 ? options_.hot_bytes : options_.warm_bytes);
    u.io = t == 2 ? cold_->store().stats().Snapshot() : ram_[t]->stats().Snapshot();
  }
  for (int c = 0; c < 3; ++c) {
    s.class_pages[c] = class_pages_[c].load();
    s.class_bytes[c] = class_bytes_[c].load();
  }
  if (cold_) s.cold_cache = cold_->stats();
  s.fallbacks = fallbacks_.load();
  s.rehomed = rehomed_.load();
  s.refused = refused_.load();
  s.cold_held = cold_held_.load();
  s.cold_unavailable = cold_unavailable_;
  return s;
}

std::string KvPageStore::Describe() const {
  std::string out;
  out += ram_[0] ? "hot " + GiB(options_.hot_bytes) : "no hot tier";
  out += ram_[1] ? ", warm " + GiB(options_.warm_bytes) + (ram_[1]->locked() ? " (locked)" : "") : ", no warm tier";
  if (cold_) {
    out += ", cold " + GiB(options_.cold_bytes) + " in " + options_.cold_dir + " (" +
           std::string(cold_->store().backend()) + (cold_->store().direct_io() ? ", O_DIRECT" : ", buffered") +
           "; cache " + GiB(options_.cold_cache_bytes) + ")";
  } else {
    out += cold_unavailable_.empty() ? ", no cold tier" : ", no cold tier (unavailable: " + cold_unavailable_ + ")";
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
