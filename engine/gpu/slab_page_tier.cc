#include "engine/gpu/slab_page_tier.h"

namespace tq::gpu {

using engine::PageId;

StatusOr<std::unique_ptr<SlabPageTier>> SlabPageTier::Open(engine::KvTier kind, std::shared_ptr<SlabMemory> memory,
                                                          uint64_t budget_bytes, uint32_t max_page_bytes) {
  const std::string name = "KV " + std::string(engine::KvTierName(kind)) + " tier (" +
                           std::string(memory->name()) + " memory)";
  if (max_page_bytes == 0) return InvalidArgumentError(name + ": pages of 0 bytes");
  const int64_t slots = static_cast<int64_t>(budget_bytes / SlotStride(max_page_bytes));
  if (slots == 0) {
    return InvalidArgumentError(name + ": a budget of " + std::to_string(budget_bytes) +
                                " bytes holds no page of " + std::to_string(max_page_bytes) + " bytes");
  }
  SlabPool pool(std::move(memory), budget_bytes);
  if (Status s = pool.AddSlab(max_page_bytes, slots); !s.ok()) return s.WithContext(name);
  std::unique_ptr<SlabPageTier> t(new SlabPageTier(kind, budget_bytes, max_page_bytes, slots, std::move(pool)));
  t->stats_.SetCapacity(static_cast<uint64_t>(slots) * SlotStride(max_page_bytes));
  return t;
}

StatusOr<engine::PageTier::Slot> SlabPageTier::Allocate(PageId id, uint32_t length, engine::PrecisionClass,
                                                       const engine::PageInfo&) {
  if (length > max_page_bytes_) {
    stats_.RecordError(storage::TierError::kOverBudget);
    return ResourceExhaustedError("KV " + std::string(engine::KvTierName(kind_)) + " tier: a page of " +
                                  std::to_string(length) + " bytes exceeds its slots of " +
                                  std::to_string(max_page_bytes_));
  }
  StatusOr<uint8_t*> slot = pool_.Allocate(max_page_bytes_);
  if (!slot.ok()) {
    stats_.RecordError(storage::TierError::kOverBudget);
    return slot.status();
  }
  slots_of_[id] = *slot;
  stats_.SetUsage(pool_.used_bytes(), slots_of_.size());
  return Slot{*slot, pool_.memory().host_readable() ? *slot : nullptr};
}

StatusOr<const uint8_t*> SlabPageTier::Write(PageId id, std::span<const uint8_t> bytes, engine::PrecisionClass cls,
                                             const engine::PageInfo& info) {
  TQ_ASSIGN_OR_RETURN(Slot slot, Allocate(id, static_cast<uint32_t>(bytes.size()), cls, info));
  if (Status s = pool_.memory().CopyIn(slot.at, bytes.data(), bytes.size()); !s.ok()) {
    Free(id);
    stats_.RecordError(storage::TierError::kIo);
    return s;
  }
  stats_.RecordWrite(bytes.size());
  return slot.host;
}

void SlabPageTier::Free(PageId id) {
  auto it = slots_of_.find(id);
  if (it == slots_of_.end()) return;
  pool_.Free(it->second);
  slots_of_.erase(it);
  stats_.SetUsage(pool_.used_bytes(), slots_of_.size());
}

Status SlabPageTier::Pin(std::span<const PinRef> pages, std::span<engine::PinnedPage> out) {
  const bool in_place = pool_.memory().host_readable();
  for (size_t i = 0; i < pages.size(); ++i) {
    const uint8_t* slot = Address(pages[i].id);
    if (slot == nullptr || pages[i].length > max_page_bytes_) {
      return NotFoundError("KV page " + std::to_string(Raw(pages[i].id)) + " is not in the " +
                           std::string(engine::KvTierName(kind_)) + " tier");
    }
    if (in_place) {
      out[i] = engine::PinnedPage{slot, nullptr};
      continue;
    }
    auto copy = std::make_shared<engine::PageBuffer>(pages[i].length);
    TQ_RETURN_IF_ERROR(pool_.memory().CopyOut(copy->data(), slot, pages[i].length));
    stats_.RecordRead(pages[i].length);
    out[i] = engine::PinnedPage{copy->data(), std::move(copy)};
  }
  return Status::Ok();
}

const uint8_t* SlabPageTier::Address(PageId id) const {
  auto it = slots_of_.find(id);
  return it == slots_of_.end() ? nullptr : it->second;
}

std::string SlabPageTier::Describe() const {
  return std::string(engine::KvTierName(kind_)) + " " + engine::GiB(budget_) + " (" +
         std::string(pool_.memory().name()) + ")";
}

}  // namespace tq::gpu
