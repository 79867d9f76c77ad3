#include "storage/ram_tier.h"

#include <spdlog/spdlog.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>

namespace tq::storage {

StatusOr<std::unique_ptr<RamTier>> RamTier::Open(const RamTierOptions& options) {
  if (options.max_page_bytes == 0)
    return InvalidArgumentError(options.name + " tier: max_page_bytes must be > 0");
  std::unique_ptr<RamTier> tier(new RamTier(options));
  tier->slot_bytes_ = (options.max_page_bytes + 63u) / 64u * 64u;
  tier->slots_ = options.capacity_bytes / tier->slot_bytes_;
  if (tier->slots_ == 0) {
    return InvalidArgumentError(options.name + " tier: capacity_bytes " +
                                std::to_string(options.capacity_bytes) + " is less than one slot of " +
                                std::to_string(tier->slot_bytes_) + " bytes");
  }
  tier->arena_bytes_ = tier->slots_ * tier->slot_bytes_;
  void* p = ::mmap(nullptr, tier->arena_bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return ErrnoToStatus(errno,
                         options.name + " tier: reserve " + std::to_string(tier->arena_bytes_) + " bytes");
  tier->arena_ = static_cast<std::byte*>(p);
  if (options.lock_memory) {
    if (::mlock(p, tier->arena_bytes_) == 0) {
      tier->locked_ = true;
    } else {
      spdlog::warn(
          "{} tier: mlock of {} bytes refused ({}); running unlocked (raise RLIMIT_MEMLOCK to pin it)",
          options.name, tier->arena_bytes_, std::strerror(errno));
    }
  }
  tier->free_slots_.reserve(tier->slots_);
  for (uint64_t s = tier->slots_; s > 0; --s) tier->free_slots_.push_back(s - 1);
  tier->stats_.SetCapacity(options.capacity_bytes);
  return tier;
}

RamTier::~RamTier() {
  if (arena_ != nullptr) ::munmap(arena_, arena_bytes_);
}

StatusOr<std::span<std::byte>> RamTier::Allocate(uint64_t page_id, uint32_t length) {
  if (length > options_.max_page_bytes) {
    return InvalidArgumentError(options_.name + " tier: page of " + std::to_string(length) +
                                " bytes exceeds max_page_bytes " + std::to_string(options_.max_page_bytes));
  }
  auto it = index_.find(page_id);
  if (it == index_.end()) {
    if (free_slots_.empty()) {
      stats_.RecordError(TierError::kOverBudget);
      return ResourceExhaustedError(options_.name + " tier: budget of " +
                                    std::to_string(options_.capacity_bytes) + " bytes is full");
    }
    it = index_.emplace(page_id, Entry{free_slots_.back(), 0}).first;
    free_slots_.pop_back();
  }
  it->second.length = length;
  stats_.RecordWrite(length);
  UpdateUsage();
  return std::span<std::byte>(SlotData(it->second.slot), length);
}

Status RamTier::Put(uint64_t page_id, std::span<const std::byte> payload) {
  TQ_ASSIGN_OR_RETURN(std::span<std::byte> slot, Allocate(page_id, static_cast<uint32_t>(payload.size())));
  if (!payload.empty()) std::memcpy(slot.data(), payload.data(), payload.size());
  return Status::Ok();
}

std::optional<std::span<const std::byte>> RamTier::Get(uint64_t page_id) {
  auto it = index_.find(page_id);
  if (it == index_.end()) return std::nullopt;
  stats_.RecordRead(it->second.length);
  return std::span<const std::byte>(SlotData(it->second.slot), it->second.length);
}

std::optional<std::span<const std::byte>> RamTier::Peek(uint64_t page_id) const {
  auto it = index_.find(page_id);
  if (it == index_.end()) return std::nullopt;
  return std::span<const std::byte>(SlotData(it->second.slot), it->second.length);
}

StatusOr<uint32_t> RamTier::Read(uint64_t page_id, std::span<std::byte> dest) {
  auto it = index_.find(page_id);
  if (it == index_.end())
    return NotFoundError(options_.name + " tier: page " + std::to_string(page_id) + " absent");
  if (dest.size() < it->second.length) return InvalidArgumentError("read buffer smaller than the page");
  if (it->second.length > 0) std::memcpy(dest.data(), SlotData(it->second.slot), it->second.length);
  stats_.RecordRead(it->second.length);
  return it->second.length;
}

Status RamTier::Erase(uint64_t page_id) {
  auto it = index_.find(page_id);
  if (it == index_.end())
    return NotFoundError(options_.name + " tier: page " + std::to_string(page_id) + " absent");
  free_slots_.push_back(it->second.slot);
  index_.erase(it);
  UpdateUsage();
  return Status::Ok();
}

}  // namespace tq::storage
