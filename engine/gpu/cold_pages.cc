#include "engine/gpu/cold_pages.h"

#include <string>

namespace tq::gpu {

StatusOr<std::unique_ptr<ColdPages>> ColdPages::Open(const storage::ColdStoreOptions& options) {
  if (options.cold_dir.empty()) return InvalidArgumentError("ColdPages: no cold directory");
  TQ_RETURN_IF_ERROR(storage::RemoveColdFiles(options.cold_dir));
  TQ_ASSIGN_OR_RETURN(std::unique_ptr<storage::ColdStore> store, storage::ColdStore::Open(options));
  return std::unique_ptr<ColdPages>(new ColdPages(std::move(store)));
}

StatusOr<std::vector<uint64_t>> ColdPages::Write(std::span<const Put> puts_in) {
  std::vector<storage::ColdStore::PutRequest> puts(puts_in.size());
  std::vector<uint64_t> ids(puts_in.size());
  for (size_t i = 0; i < puts_in.size(); ++i) {
    ids[i] = next_id_++;
    puts[i] = {ids[i], puts_in[i].payload, puts_in[i].stream};
  }
  const std::vector<Status> done = store_->PutMany(puts);
  for (size_t i = 0; i < done.size(); ++i) {
    if (done[i].ok()) continue;
    Erase(ids);
    return Status(done[i].code(), "cold tier: writing a KV page pair: " + done[i].message());
  }
  return ids;
}

void ColdPages::Erase(std::span<const uint64_t> ids) {
  for (uint64_t id : ids) {
    if (store_->Contains(id)) (void)store_->Erase(id);
  }
}

Status ColdPages::StartReads(int set, std::span<const uint64_t> ids, std::span<uint8_t* const> dests,
                             size_t bytes) {
  if (set < 0 || set > 1) return InvalidArgumentError("ColdPages: read set must be 0 or 1");
  if (pending_[set] != 0)
    return FailedPreconditionError("ColdPages: set " + std::to_string(set) + " has reads pending");
  if (ids.size() != dests.size())
    return InvalidArgumentError("ColdPages: as many buffers as pages are needed");
  std::vector<storage::ColdStore::ReadRequest> reads(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    reads[i] = {ids[i], std::span<std::byte>(reinterpret_cast<std::byte*>(dests[i]), bytes),
                static_cast<uint64_t>(set)};
  }
  failed_[set] = Status::Ok();
  TQ_RETURN_IF_ERROR(store_->SubmitReads(reads));
  pending_[set] = reads.size();
  return Status::Ok();
}

Status ColdPages::FinishReads(int set) {
  if (set < 0 || set > 1) return InvalidArgumentError("ColdPages: read set must be 0 or 1");
  while (pending_[set] > 0) {
    results_.clear();
    TQ_RETURN_IF_ERROR(store_->WaitReads(&results_, 1));
    for (const storage::ColdStore::ReadResult& r : results_) {
      const int s = static_cast<int>(r.tag);
      --pending_[s];
      if (!r.status.ok() && failed_[s].ok()) {
        failed_[s] = Status(r.status.code(), "cold tier: KV page pair " + std::to_string(r.page_id) + ": " +
                                                 r.status.message());
      }
    }
  }
  return failed_[set];
}

uint64_t ColdPages::free_pages(uint32_t payload_bytes) const {
  const uint32_t per_page = store_->SlotsFor(payload_bytes);
  const uint64_t free = store_->slot_count() - store_->slots_used();
  return per_page == 0 ? 0 : free / per_page;
}

}  // namespace tq::gpu
