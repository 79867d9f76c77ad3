#include "storage/cold_store.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "storage/page_format.h"

namespace tq::storage {
namespace {
constexpr size_t kNoResult = ~size_t{0};  // Op::result of writes that are not PutMany's (slot erasure)
}  // namespace

uint64_t ColdStore::SlotOffset(uint64_t slot) const {
  return kFileHeaderBytes + (slot % slots_per_file_) * uint64_t{slot_bytes_};
}

std::span<std::byte> ColdStore::Staging(uint32_t op) const {
  return {staging_.data() + uint64_t{op} * slot_bytes_, slot_bytes_};
}

void ColdStore::UpdateUsage() {
  stats_.SetUsage(index_.size() * uint64_t{slot_bytes_}, index_.size());
}

void ColdStore::CountError(const Status& status) {
  switch (status.code()) {
    case StatusCode::kResourceExhausted: stats_.RecordError(TierError::kNoSpace); break;
    case StatusCode::kDataLoss: stats_.RecordError(TierError::kDataLoss); break;
    default: stats_.RecordError(TierError::kIo); break;
  }
}

StatusOr<uint32_t> ColdStore::AcquireOp() {
  while (free_ops_.empty()) TQ_RETURN_IF_ERROR(Pump());
  uint32_t op = free_ops_.back();
  free_ops_.pop_back();
  ops_[op] = Op{};
  return op;
}

Status ColdStore::Pump() {
  if (!broken_.ok()) return broken_;
  std::vector<IoCompletion> done;
  Status s = queue_->Wait(&done, 1);
  for (const IoCompletion& c : done) Dispatch(c);
  if (!s.ok()) {
    broken_ = s.WithContext("cold tier io queue");
    spdlog::error("{}", broken_.ToString());
    return broken_;
  }
  StartBacklog();
  return broken_;
}

void ColdStore::Dispatch(const IoCompletion& c) {
  Op& op = ops_[c.user_data];
  if (op.kind == OpKind::kRead) {
    FinishRead(op, c);
    return;
  }
  if (op.kind == OpKind::kScan) {
    FinishScan(op, c);
    return;
  }
  if (op.kind == OpKind::kWrite && op.result != kNoResult) {
    FinishPut(op, c);
    return;
  }
  op.done = true;
  op.status = c.status;
  op.length = c.bytes;
}

void ColdStore::FinishRead(Op& op, const IoCompletion& c) {
  Status status = c.status;
  if (status.ok()) {
    std::span<const std::byte> bytes = Staging(static_cast<uint32_t>(&op - ops_.data()));
    StatusOr<PageHeader> header = DecodePage(bytes.first(PageIoBytes(op.length)), options_.max_page_bytes);
    if (!header.ok()) {
      status = header.status().code() == StatusCode::kNotFound ? DataLossError("page header zeroed on disk")
                                                               : header.status();
    } else if (header->page_id != op.page_id || header->length != op.length) {
      status = DataLossError("slot " + std::to_string(op.slot) + " holds page " +
                             std::to_string(header->page_id) + ", expected " + std::to_string(op.page_id));
    } else {
      std::memcpy(op.dest.data(), bytes.data() + kPageHeaderBytes, op.length);
      auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - op.start).count();
      stats_.RecordRead(op.length, static_cast<uint64_t>(ns));
    }
  }
  if (!status.ok()) {
    status = std::move(status).WithContext("cold read of page " + std::to_string(op.page_id));
    CountError(status);
    spdlog::warn("{}", status.ToString());
  }
  auto it = slot_readers_.find(op.slot);
  if (it != slot_readers_.end() && --it->second == 0) slot_readers_.erase(it);
  if (op.sync) {
    op.done = true;
    op.length = status.ok() ? op.length : 0;
    op.status = std::move(status);
    return;
  }
  ready_.push_back(ReadResult{op.tag, op.page_id, status.ok() ? op.length : 0, std::move(status)});
  op.kind = OpKind::kIdle;
  free_ops_.push_back(static_cast<uint32_t>(&op - ops_.data()));
}

Status ColdStore::EnqueueIo(uint32_t op, IoOp kind, uint64_t slot, uint32_t bytes) {
  IoRequest r{kind, FileOf(slot), SlotOffset(slot), Staging(op).data(), bytes, op};
  return queue_->Enqueue(r);
}

void ColdStore::StartBacklog() {
  bool enqueued = false;
  while (!backlog_.empty() && !free_ops_.empty() && broken_.ok()) {
    Waiting w = std::move(backlog_.front());
    backlog_.pop_front();
    const ReadRequest& r = w.request;
    auto it = index_.find(r.page_id);
    if (it == index_.end()) {
      ready_.push_back(
          {r.tag, r.page_id, 0, NotFoundError("page " + std::to_string(r.page_id) + " not in cold tier")});
      continue;
    }
    if (r.dest.size() < it->second.length) {
      ready_.push_back({r.tag, r.page_id, 0, InvalidArgumentError("read buffer smaller than the page")});
      continue;
    }
    uint32_t op = free_ops_.back();
    free_ops_.pop_back();
    ops_[op] = Op{OpKind::kRead, r.page_id, it->second.slot, r.tag, it->second.length, r.dest, w.start};
    Status s = EnqueueIo(op, IoOp::kRead, it->second.slot, PageIoBytes(it->second.length));
    if (!s.ok()) {  // cannot happen while ops_ and the queue have the same depth
      free_ops_.push_back(op);
      ready_.push_back({r.tag, r.page_id, 0, std::move(s)});
      continue;
    }
    ++slot_readers_[it->second.slot];
    enqueued = true;
  }
  if (enqueued) {
    Status s = queue_->Submit();
    if (!s.ok()) broken_ = std::move(s).WithContext("cold tier io submit");
  }
}

Status ColdStore::SubmitReads(std::span<const ReadRequest> requests) {
  if (!broken_.ok()) return broken_;
  auto now = Clock::now();
  for (const ReadRequest& r : requests) backlog_.push_back({r, now});
  reads_outstanding_ += requests.size();
  StartBacklog();
  return broken_;
}

size_t ColdStore::PollReads(std::vector<ReadResult>* out) {
  std::vector<IoCompletion> done;
  queue_->Poll(&done);
  for (const IoCompletion& c : done) Dispatch(c);
  StartBacklog();
  size_t n = ready_.size();
  for (ReadResult& r : ready_) out->push_back(std::move(r));
  ready_.clear();
  reads_outstanding_ -= n;
  return n;
}

Status ColdStore::WaitReads(std::vector<ReadResult>* out, size_t min_count) {
  size_t target = std::min(min_count, reads_outstanding_);
  size_t got = PollReads(out);
  while (got < target) {
    TQ_RETURN_IF_ERROR(Pump());
    got += PollReads(out);
  }
  return Status::Ok();
}

StatusOr<uint32_t> ColdStore::Read(uint64_t page_id, std::span<std::byte> dest) {
  if (!broken_.ok()) return broken_;
  auto it = index_.find(page_id);
  if (it == index_.end()) return NotFoundError("page " + std::to_string(page_id) + " not in cold tier");
  if (dest.size() < it->second.length) return InvalidArgumentError("read buffer smaller than the page");
  const Entry entry = it->second;
  TQ_ASSIGN_OR_RETURN(uint32_t op, AcquireOp());
  ops_[op] = Op{OpKind::kRead, page_id, entry.slot, 0, entry.length, dest, Clock::now(), true};
  Status s = EnqueueIo(op, IoOp::kRead, entry.slot, PageIoBytes(entry.length));
  if (s.ok()) {
    ++slot_readers_[entry.slot];
    s = queue_->Submit();
  }
  while (s.ok() && !ops_[op].done) s = Pump();
  ops_[op].kind = OpKind::kIdle;
  free_ops_.push_back(op);
  TQ_RETURN_IF_ERROR(s);
  TQ_RETURN_IF_ERROR(ops_[op].status);
  return ops_[op].length;
}

Status ColdStore::WriteSlot(uint64_t slot, uint32_t bytes, uint32_t op) {
  ops_[op].kind = OpKind::kWrite;
  ops_[op].slot = slot;
  Status s = EnqueueIo(op, IoOp::kWrite, slot, bytes);
  if (s.ok()) s = queue_->Submit();
  while (s.ok() && !ops_[op].done) s = Pump();
  if (s.ok()) s = ops_[op].status;
  ops_[op].kind = OpKind::kIdle;
  free_ops_.push_back(op);
  return s;
}

Status ColdStore::EnsureAllocated(uint64_t slot) {
  File& f = files_[FileOf(slot)];
  const uint64_t local = slot % slots_per_file_;
  if (local < f.allocated_slots || options_.grow_slots == 0) return Status::Ok();
  uint64_t target = std::min(slots_per_file_, std::max(local + 1, f.allocated_slots + options_.grow_slots));
  off_t from = static_cast<off_t>(kFileHeaderBytes + f.allocated_slots * slot_bytes_);
  off_t length = static_cast<off_t>((target - f.allocated_slots) * slot_bytes_);
  if (::fallocate(f.fd, 0, from, length) != 0) {
    int err = errno;
    if (err == EOPNOTSUPP || err == ENOSYS) {
      spdlog::info("cold tier: fallocate not supported here; files grow by writes");
      options_.grow_slots = 0;
      return Status::Ok();
    }
    return ErrnoToStatus(err, "fallocate cold file");
  }
  f.allocated_slots = target;
  return Status::Ok();
}

Status ColdStore::Put(uint64_t page_id, std::span<const std::byte> payload) {
  PutRequest request{page_id, payload};
  return std::move(PutMany({&request, 1})[0]);
}

std::vector<Status> ColdStore::PutMany(std::span<const PutRequest> requests) {
  std::vector<Status> results(requests.size());
  if (!broken_.ok()) {
    for (Status& r : results) r = broken_;
    return results;
  }
  batch_results_ = &results;
  for (size_t i = 0; i < requests.size(); ++i) {
    results[i] = StartPut(requests[i], i);
  }
  if (batch_in_flight_ > 0) {
    if (Status s = queue_->Submit(); !s.ok()) broken_ = std::move(s).WithContext("cold tier io submit");
  }
  while (batch_in_flight_ > 0 && Pump().ok()) {
  }
  batch_results_ = nullptr;
  if (batch_in_flight_ > 0) {  // the queue broke under us
    for (Status& r : results) {
      if (r.ok()) r = broken_;
    }
  }
  std::vector<uint64_t> old;
  old.swap(superseded_);
  for (uint64_t slot : old) ReleaseSlot(slot);
  UpdateUsage();
  return results;
}

// Validates, takes a slot, encodes into a staging buffer and enqueues the write. OK means "in flight".
Status ColdStore::StartPut(const PutRequest& request, size_t result) {
  const std::string what = "cold write of page " + std::to_string(request.page_id);
  if (request.payload.size() > options_.max_page_bytes) {
    return InvalidArgumentError(what + ": " + std::to_string(request.payload.size()) +
                                " bytes exceed max_page_bytes " + std::to_string(options_.max_page_bytes));
  }
  if (!admitting()) return ResourceExhaustedError(what + ": not admitting pages (its file system is full)");
  if (free_slots_.empty()) {
    stats_.RecordError(TierError::kOverBudget);
    return ResourceExhaustedError(what + ": budget of " + std::to_string(options_.capacity_bytes) +
                                  " bytes is full");
  }
  StatusOr<uint32_t> op = AcquireOp();  // may complete earlier writes of this batch first
  if (!op.ok()) return op.status();
  if (!admitting()) {  // one of them found the disk full
    free_ops_.push_back(*op);
    return ResourceExhaustedError(what + ": not admitting pages (its file system is full)");
  }
  const uint64_t slot = free_slots_.back();
  free_slots_.pop_back();
  Status s = EnsureAllocated(slot);
  if (s.ok()) {
    const auto length = static_cast<uint32_t>(request.payload.size());
    Op& o = ops_[*op];
    o.kind = OpKind::kWrite;
    o.page_id = request.page_id;
    o.slot = slot;
    o.length = length;
    o.sequence = next_sequence_++;
    o.result = result;
    EncodePage(request.page_id, o.sequence, request.payload, Staging(*op));
    s = EnqueueIo(*op, IoOp::kWrite, slot, PageIoBytes(length));
  }
  if (!s.ok()) {
    free_slots_.push_back(slot);
    free_ops_.push_back(*op);
    CountError(s);
    if (s.code() == StatusCode::kResourceExhausted && admitting_.exchange(false)) {
      spdlog::warn("cold tier: file system full ({}); no new pages until space is freed", s.ToString());
    }
    return std::move(s).WithContext(what);
  }
  ++batch_in_flight_;
  return Status::Ok();
}

void ColdStore::FinishPut(Op& op, const IoCompletion& c) {
  Status s = c.status;
  if (s.ok()) {
    stats_.RecordWrite(op.length);
    auto [it, inserted] = index_.try_emplace(op.page_id);
    if (!inserted && it->second.sequence > op.sequence) {
      superseded_.push_back(op.slot);  // a later Put of the same id in this batch finished first
    } else {
      if (!inserted) superseded_.push_back(it->second.slot);
      it->second = Entry{op.slot, op.length, op.sequence};
    }
  } else {
    free_slots_.push_back(op.slot);
    CountError(s);
    if (s.code() == StatusCode::kResourceExhausted && admitting_.exchange(false)) {
      spdlog::warn("cold tier: file system full ({}); no new pages until space is freed", s.ToString());
    }
    s = std::move(s).WithContext("cold write of page " + std::to_string(op.page_id));
  }
  if (batch_results_ != nullptr) (*batch_results_)[op.result] = std::move(s);
  --batch_in_flight_;
  op.kind = OpKind::kIdle;
  free_ops_.push_back(static_cast<uint32_t>(&op - ops_.data()));
}

void ColdStore::ReleaseSlot(uint64_t slot) {
  while (slot_readers_.count(slot) != 0 && Pump().ok()) {
  }
  StatusOr<uint32_t> op = AcquireOp();
  Status s = op.status();
  if (op.ok()) {
    std::memset(Staging(*op).data(), 0, kIoAlignment);
    s = WriteSlot(slot, kIoAlignment, *op);
  }
  if (!s.ok()) {
    CountError(s);
    spdlog::warn("cold tier: could not erase slot {} on disk ({}); its page may reappear after a restart",
                 slot, s.ToString());
  }
  free_slots_.push_back(slot);
}

Status ColdStore::Erase(uint64_t page_id) {
  if (!broken_.ok()) return broken_;
  auto it = index_.find(page_id);
  if (it == index_.end()) return NotFoundError("page " + std::to_string(page_id) + " not in cold tier");
  const uint64_t slot = it->second.slot;
  index_.erase(it);
  ReleaseSlot(slot);
  UpdateUsage();
  return Status::Ok();
}

std::optional<uint32_t> ColdStore::PageLength(uint64_t page_id) const {
  auto it = index_.find(page_id);
  if (it == index_.end()) return std::nullopt;
  return it->second.length;
}

std::vector<uint64_t> ColdStore::PageIds() const {
  std::vector<uint64_t> ids;
  ids.reserve(index_.size());
  for (const auto& [id, entry] : index_) ids.push_back(id);
  return ids;
}

Status ColdStore::Sync() {
  for (const File& f : files_) {
    if (f.fd >= 0 && ::fdatasync(f.fd) != 0) return ErrnoToStatus(errno, "fdatasync cold file");
  }
  return Status::Ok();
}

}  // namespace tq::storage
