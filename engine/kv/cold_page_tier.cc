#include "engine/kv/cold_page_tier.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "engine/kv/page_record.h"
#include "storage/page_format.h"

namespace tq::engine {

StatusOr<std::unique_ptr<ColdPageTier>> ColdPageTier::Open(const KvStoreOptions& options, uint32_t largest_page) {
  storage::ColdStoreOptions co;
  co.cold_dir = options.cold_dir;
  co.capacity_bytes = options.cold_bytes;
  // Any page may move to the cold tier (the prefix cache keeps finished sequences there), behind its record.
  // Slots are 4 KiB: a page takes the slots its bytes need, and a sequence's (layer, KV head) pages lie back
  // to back on disk (PageInfo::stream), so reading them is a few large reads.
  co.max_page_bytes = largest_page + RecordBytes(kTransformParts * options.head_dim);
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
  std::unique_ptr<ColdPageTier> t(new ColdPageTier());
  t->options_ = options;
  // The store caps its budget to the room its file system has (a warning says so): report what it holds.
  t->capacity_ = std::min(options.cold_bytes, (*store)->slot_count() * (*store)->slot_bytes());
  t->Recover(**store);
  t->cache_ = std::make_unique<ColdPageCache>(std::move(*store), options.cold_cache_bytes);
  return t;
}

uint32_t ColdPageTier::StoredBytes(uint32_t length, const PageInfo& info) const {
  return length + RecordBytes(TransformFloats(info.transform));
}

uint64_t ColdPageTier::SlotsFor(uint32_t stored) const {
  const storage::ColdStore& store = cache_->store();
  return stored <= store.max_page_bytes() ? store.SlotsFor(stored) : 0;
}

StatusOr<const uint8_t*> ColdPageTier::Write(PageId id, std::span<const uint8_t> bytes, PrecisionClass cls,
                                             const PageInfo& info) {
  PageRecord r;
  r.layout_fingerprint = options_.fingerprint;
  r.prefix_hash = info.prefix_hash;
  r.parent_hash = info.parent_hash;
  r.page_index = info.page_index;
  r.layer = info.layer;
  r.kv_head = info.kv_head;
  r.cls = cls;
  r.k = info.k;
  r.v = info.v;
  r.transform = info.transform;
  const uint32_t record_bytes = RecordBytes(TransformFloats(r.transform));
  PageBuffer out(record_bytes + bytes.size());
  EncodeRecord(r, out);
  std::memcpy(out.data() + record_bytes, bytes.data(), bytes.size());
  // The write is queued; its bytes are readable from the cache at once. A failure comes back through
  // TakeFailedWrites.
  cache_->Write(id, std::move(out), info.stream);
  return static_cast<const uint8_t*>(nullptr);
}

Status ColdPageTier::Pin(std::span<const PinRef> pages, std::span<PinnedPage> out) {
  thread_local std::vector<PageId> ids;
  thread_local std::vector<PageBytes> bytes;
  ids.clear();
  for (const PinRef& p : pages) ids.push_back(p.id);
  bytes.assign(ids.size(), nullptr);
  Status status = cache_->GetMany(ids, bytes);
  for (size_t j = 0; j < pages.size() && status.ok(); ++j) {
    const PinRef& p = pages[j];
    if (bytes[j]->size() != p.stored || p.length > p.stored) {
      status = DataLossError("KV page " + std::to_string(Raw(p.id)) + " read back with " +
                             std::to_string(bytes[j]->size()) + " bytes, not " + std::to_string(p.stored));
      break;
    }
    out[j] = PinnedPage{bytes[j]->data() + (p.stored - p.length), std::move(bytes[j])};
  }
  bytes.clear();  // the holds are in out now
  return status;
}

void ColdPageTier::Prefetch(std::span<const PageId> ids) {
  cache_->Prefetch(ids);
}

std::vector<PageTier::FailedWrite> ColdPageTier::TakeFailedWrites() {
  std::vector<FailedWrite> out;
  for (ColdPageCache::FailedWrite& f : cache_->TakeFailedWrites()) {
    out.push_back({f.id, std::move(f.bytes), std::move(f.status)});
  }
  return out;
}

std::string ColdPageTier::Describe() const {
  const storage::ColdStore& store = cache_->store();
  return "cold " + GiB(capacity_) + " in " + options_.cold_dir + " (" + std::string(store.backend()) +
         (store.direct_io() ? ", O_DIRECT" : ", buffered") + "; cache " + GiB(options_.cold_cache_bytes) + ")";
}

std::vector<ColdPageTier::Recovered> ColdPageTier::TakeRecovered() {
  std::vector<Recovered> out;
  out.swap(recovered_);
  return out;
}

void ColdPageTier::Recover(storage::ColdStore& store) {
  std::vector<uint8_t> buf(store.max_page_bytes());
  uint64_t kept = 0, dropped = 0;
  for (uint64_t id : store.PageIds()) {
    StatusOr<uint32_t> n = store.Read(id, std::as_writable_bytes(std::span<uint8_t>(buf)));
    uint32_t record_bytes = 0;
    StatusOr<PageRecord> r = n.ok() ? DecodeRecord(std::span<const uint8_t>(buf.data(), *n), &record_bytes)
                                    : StatusOr<PageRecord>(n.status());
    if (!r.ok() || options_.fingerprint == 0 || r->layout_fingerprint != options_.fingerprint ||
        r->prefix_hash == 0) {
      // Another model or layout, an unreadable page, or a page no prefix names: not trusted, not kept.
      store.Erase(id).IgnoreError();
      ++dropped;
      continue;
    }
    Recovered page;
    page.id = PageId{id};
    page.cls = r->cls;
    page.info = {"", r->layer, r->kv_head, 0, r->k, r->v, r->prefix_hash, r->parent_hash, r->page_index,
                 std::move(r->transform)};
    page.length = *n - record_bytes;
    page.stored = *n;
    recovered_.push_back(std::move(page));
    ++kept;
  }
  if (kept + dropped > 0) {
    spdlog::info("KV cold tier: {} pages of an earlier run kept for the prefix cache, {} dropped", kept, dropped);
  }
}

}  // namespace tq::engine
