#include "engine/kv/ram_page_tier.h"

#include <cstdio>
#include <cstring>

namespace tq::engine {

std::string GiB(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1u << 30));
  return buf;
}

StatusOr<std::unique_ptr<RamPageTier>> RamPageTier::Open(KvTier kind, uint64_t budget_bytes,
                                                         uint32_t max_page_bytes, bool lock) {
  storage::RamTierOptions ro;
  ro.name = std::string(KvTierName(kind));
  ro.capacity_bytes = budget_bytes;
  ro.max_page_bytes = max_page_bytes;
  ro.lock_memory = lock;
  auto ram = storage::RamTier::Open(ro);
  if (!ram.ok()) return ram.status().WithContext("KV " + ro.name + " tier");
  return std::unique_ptr<RamPageTier>(new RamPageTier(kind, budget_bytes, std::move(*ram)));
}

StatusOr<const uint8_t*> RamPageTier::Write(PageId id, std::span<const uint8_t> bytes, PrecisionClass,
                                            const PageInfo&) {
  TQ_ASSIGN_OR_RETURN(std::span<std::byte> slot, ram_->Allocate(Raw(id), static_cast<uint32_t>(bytes.size())));
  std::memcpy(slot.data(), bytes.data(), bytes.size());
  return reinterpret_cast<const uint8_t*>(slot.data());
}

StatusOr<PageTier::Slot> RamPageTier::Allocate(PageId id, uint32_t length, PrecisionClass, const PageInfo&) {
  TQ_ASSIGN_OR_RETURN(std::span<std::byte> slot, ram_->Allocate(Raw(id), length));
  auto* at = reinterpret_cast<uint8_t*>(slot.data());
  return Slot{at, at};
}

const uint8_t* RamPageTier::Address(PageId id) const {
  auto bytes = ram_->Peek(Raw(id));
  return bytes ? reinterpret_cast<const uint8_t*>(bytes->data()) : nullptr;
}

void RamPageTier::Free(PageId id) { ram_->Erase(Raw(id)).IgnoreError(); }

Status RamPageTier::Pin(std::span<const PinRef> pages, std::span<PinnedPage> out) {
  for (size_t i = 0; i < pages.size(); ++i) {
    auto bytes = ram_->Get(Raw(pages[i].id));
    if (!bytes || bytes->size() != pages[i].length) {
      return NotFoundError("KV page " + std::to_string(Raw(pages[i].id)) + " is not in the " +
                           std::string(KvTierName(kind_)) + " tier");
    }
    out[i] = PinnedPage{reinterpret_cast<const uint8_t*>(bytes->data()), nullptr};
  }
  return Status::Ok();
}

std::string RamPageTier::Describe() const {
  return std::string(KvTierName(kind_)) + " " + GiB(budget_) + (ram_->locked() ? " (locked)" : "");
}

}  // namespace tq::engine
