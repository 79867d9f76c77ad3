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

uint32_t ColdStore::SlotsFor(uint32_t payload_bytes) const {
  return storage::SlotsFor(payload_bytes, slot_bytes_);
}

uint64_t ColdStore::ExtentOf(uint64_t slot) const {
  return FileOf(slot) * extents_per_file_ + (slot % slots_per_file_) / extent_slots_;
}

uint64_t ColdStore::ExtentFirstSlot(uint64_t extent) const {
  return (extent / extents_per_file_) * slots_per_file_ + (extent % extents_per_file_) * extent_slots_;
}

uint32_t ColdStore::ExtentSize(uint64_t extent) const {
  const uint64_t first = ExtentFirstSlot(extent);
  const uint64_t file_end = (first / slots_per_file_ + 1) * slots_per_file_;
  return static_cast<uint32_t>(std::min({first + extent_slots_, file_end, total_slots_}) - first);
}

std::span<std::byte> ColdStore::Staging(uint32_t op) const {
  const uint64_t bytes = uint64_t{extent_slots_} * slot_bytes_;
  return {staging_.data() + op * bytes, bytes};
}

void ColdStore::UpdateUsage() {
  stats_.SetUsage(used_slots_ * uint64_t{slot_bytes_}, index_.size());
}

bool ColdStore::RunFree(uint64_t first, uint32_t n) const {
  for (uint64_t s = first; s < first + n; ++s) {
    if (slot_used_[s] != 0) return false;
  }
  return true;
}

void ColdStore::MarkUsed(uint64_t first, uint32_t n) {
  const uint64_t x = ExtentOf(first);
  std::fill_n(slot_used_.begin() + static_cast<std::ptrdiff_t>(first), n, uint8_t{1});
  extents_[x].used += n;
  used_slots_ += n;
}

void ColdStore::MarkFree(uint64_t first, uint32_t n) {
  const uint64_t x = ExtentOf(first);
  std::fill_n(slot_used_.begin() + static_cast<std::ptrdiff_t>(first), n, uint8_t{0});
  Extent& e = extents_[x];
  e.used -= n;
  used_slots_ -= n;
  if (e.used != 0) return;
  if (e.owned) {
    auto it = stream_extent_.find(e.owner);
    if (it != stream_extent_.end() && it->second == x) stream_extent_.erase(it);
  }
  e = Extent{};
  free_extents_.push_back(x);
}

std::optional<uint64_t> ColdStore::AllocateSlots(uint32_t n, uint64_t stream) {
  // 1. Right after the stream's last page, in its extent.
  if (auto it = stream_extent_.find(stream); it != stream_extent_.end()) {
    Extent& e = extents_[it->second];
    const uint64_t first = ExtentFirstSlot(it->second) + e.cursor;
    if (e.cursor + n <= ExtentSize(it->second) && RunFree(first, n)) {
      e.cursor += n;
      MarkUsed(first, n);
      return first;
    }
    stream_extent_.erase(it);  // full: the stream moves on
  }
  // 2. A free extent, which the stream then owns. Extents freed while in use elsewhere may sit in the stack
  //    after being taken by step 3: skip those.
  while (!free_extents_.empty()) {
    const uint64_t x = free_extents_.back();
    free_extents_.pop_back();
    if (extents_[x].used != 0 || ExtentSize(x) < n) continue;
    extents_[x] = Extent{0, n, stream, true};
    stream_extent_[stream] = x;
    MarkUsed(ExtentFirstSlot(x), n);
    return ExtentFirstSlot(x);
  }
  // 3. Any free run that fits inside one extent (the budget is nearly full).
  const uint64_t count = extents_.size();
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t x = (search_extent_ + i) % count;
    const uint32_t size = ExtentSize(x);
    if (size - extents_[x].used < n) continue;
    const uint64_t base = ExtentFirstSlot(x);
    for (uint32_t at = 0; at + n <= size; ++at) {
      if (!RunFree(base + at, n)) continue;
      search_extent_ = x;
      MarkUsed(base + at, n);
      return base + at;
    }
  }
  return std::nullopt;
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

Status ColdStore::Pump(size_t* completions) {
  if (!broken_.ok()) return broken_;
  std::vector<IoCompletion> done;
  Status s = queue_->Wait(&done, 1);
  if (completions != nullptr) *completions = done.size();
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
  const std::span<const std::byte> run = Staging(static_cast<uint32_t>(&op - ops_.data()));
  const uint64_t first = op.parts.front().slot;
  const uint64_t run_bytes = (op.parts.back().slot - first) * slot_bytes_ + PageIoBytes(op.parts.back().length);
  if (op.parts.size() > 1 && (!c.status.ok() || c.bytes < run_bytes)) {
    // The run failed as a whole (EIO, a short read): each page is read again by itself, so only the pages that
    // are really unreadable fail.
    for (auto p = op.parts.rbegin(); p != op.parts.rend(); ++p) {
      auto it = slot_readers_.find(p->slot);
      if (it != slot_readers_.end() && --it->second == 0) slot_readers_.erase(it);
      backlog_.push_front({ReadRequest{p->page_id, p->dest, p->tag}, p->start, true});
    }
    op.kind = OpKind::kIdle;
    op.parts.clear();
    free_ops_.push_back(static_cast<uint32_t>(&op - ops_.data()));
    return;
  }
  for (ReadPart& part : op.parts) {
    Status status = c.status;
    const uint64_t at = (part.slot - first) * slot_bytes_;
    if (status.ok() && c.bytes < at + PageIoBytes(part.length)) {
      status = DataLossError("short read: " + std::to_string(c.bytes) + " bytes");
    }
    if (status.ok()) {
      std::span<const std::byte> bytes = run.subspan(at, PageIoBytes(part.length));
      StatusOr<PageHeader> header = DecodePage(bytes, options_.max_page_bytes);
      if (!header.ok()) {
        status = header.status().code() == StatusCode::kNotFound ? DataLossError("page header zeroed on disk")
                                                                 : header.status();
      } else if (header->page_id != part.page_id || header->length != part.length) {
        status = DataLossError("slot " + std::to_string(part.slot) + " holds page " +
                               std::to_string(header->page_id) + ", expected " + std::to_string(part.page_id));
      } else {
        std::memcpy(part.dest.data(), bytes.data() + kPageHeaderBytes, part.length);
        auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - part.start).count();
        stats_.RecordRead(part.length, static_cast<uint64_t>(ns));
      }
    }
    if (!status.ok()) {
      status = std::move(status).WithContext("cold read of page " + std::to_string(part.page_id));
      CountError(status);
      spdlog::warn("{}", status.ToString());
    }
    auto it = slot_readers_.find(part.slot);
    if (it != slot_readers_.end() && --it->second == 0) slot_readers_.erase(it);
    if (op.sync) {  // one part
      op.done = true;
      op.length = status.ok() ? part.length : 0;
      op.status = std::move(status);
      return;
    }
    ready_.push_back(ReadResult{part.tag, part.page_id, status.ok() ? part.length : 0, std::move(status)});
  }
  op.kind = OpKind::kIdle;
  op.parts.clear();
  free_ops_.push_back(static_cast<uint32_t>(&op - ops_.data()));
}

Status ColdStore::EnqueueIo(uint32_t op, IoOp kind, uint64_t slot, uint32_t bytes) {
  IoRequest r{kind, FileOf(slot), SlotOffset(slot), Staging(op).data(), bytes, op};
  return queue_->Enqueue(r);
}

bool ColdStore::PrepareRead(const Waiting& w, ReadPart* part) {
  const ReadRequest& r = w.request;
  auto it = index_.find(r.page_id);
  if (it == index_.end()) {
    ready_.push_back({r.tag, r.page_id, 0, NotFoundError("page " + std::to_string(r.page_id) + " not in cold tier")});
    return false;
  }
  if (r.dest.size() < it->second.length) {
    ready_.push_back({r.tag, r.page_id, 0, InvalidArgumentError("read buffer smaller than the page")});
    return false;
  }
  *part = ReadPart{r.page_id, it->second.slot, r.tag, it->second.length, r.dest, w.start};
  return true;
}

void ColdStore::StartBacklog() {
  bool enqueued = false;
  const uint64_t max_run = uint64_t{extent_slots_} * slot_bytes_;
  while (!backlog_.empty() && !free_ops_.empty() && broken_.ok()) {
    ReadPart part;
    const bool alone = backlog_.front().alone;
    const bool ok = PrepareRead(backlog_.front(), &part);
    backlog_.pop_front();
    if (!ok) continue;
    uint32_t op = free_ops_.back();
    free_ops_.pop_back();
    Op& o = ops_[op];
    o = Op{};
    o.kind = OpKind::kRead;
    o.parts.push_back(part);
    // Requests that follow for pages lying right after this run, in the same file, join it.
    uint64_t end = part.slot + SlotsFor(part.length);
    uint64_t bytes = uint64_t{PageIoBytes(part.length)};
    while (!alone && !backlog_.empty() && !backlog_.front().alone) {
      auto next = index_.find(backlog_.front().request.page_id);
      if (next == index_.end() || next->second.slot != end || FileOf(end) != FileOf(part.slot) ||
          backlog_.front().request.dest.size() < next->second.length) {
        break;
      }
      const uint64_t run = (end - part.slot) * slot_bytes_ + PageIoBytes(next->second.length);
      if (run > max_run) break;
      ReadPart more;
      PrepareRead(backlog_.front(), &more);
      backlog_.pop_front();
      o.parts.push_back(more);
      end += SlotsFor(more.length);
      bytes = run;
    }
    Status s = EnqueueIo(op, IoOp::kRead, part.slot, static_cast<uint32_t>(bytes));
    if (!s.ok()) {  // cannot happen while ops_ and the queue have the same depth
      for (const ReadPart& p : o.parts) ready_.push_back({p.tag, p.page_id, 0, s});
      o = Op{};
      free_ops_.push_back(op);
      continue;
    }
    for (const ReadPart& p : o.parts) ++slot_readers_[p.slot];
    ++read_ios_;
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
    size_t completions = 0;
    TQ_RETURN_IF_ERROR(Pump(&completions));
    got += PollReads(out);
    if (completions == 0) break;  // woken (WakeReads)
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
  ops_[op].kind = OpKind::kRead;
  ops_[op].sync = true;
  ops_[op].parts.push_back(ReadPart{page_id, entry.slot, 0, entry.length, dest, Clock::now()});
  Status s = EnqueueIo(op, IoOp::kRead, entry.slot, PageIoBytes(entry.length));
  if (s.ok()) {
    ++slot_readers_[entry.slot];
    ++read_ios_;
    s = queue_->Submit();
  }
  while (s.ok() && !ops_[op].done) s = Pump();
  ops_[op].kind = OpKind::kIdle;
  ops_[op].parts.clear();
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

Status ColdStore::EnsureAllocated(uint64_t slot) {  // slot: the last slot that must be inside the file
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
  std::vector<std::pair<uint64_t, uint32_t>> old;
  old.swap(superseded_);
  for (auto [slot, n] : old) ReleaseSlots(slot, n);
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
  StatusOr<uint32_t> op = AcquireOp();  // may complete earlier writes of this batch first
  if (!op.ok()) return op.status();
  if (!admitting()) {  // one of them found the disk full
    free_ops_.push_back(*op);
    return ResourceExhaustedError(what + ": not admitting pages (its file system is full)");
  }
  const uint32_t n = SlotsFor(static_cast<uint32_t>(request.payload.size()));
  const std::optional<uint64_t> taken = AllocateSlots(n, request.stream);
  if (!taken) {
    free_ops_.push_back(*op);
    stats_.RecordError(TierError::kOverBudget);
    return ResourceExhaustedError(what + ": budget of " + std::to_string(options_.capacity_bytes) +
                                  " bytes is full");
  }
  const uint64_t slot = *taken;
  Status s = EnsureAllocated(slot + n - 1);
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
    MarkFree(slot, n);
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
      superseded_.push_back({op.slot, SlotsFor(op.length)});  // a later Put of the id in this batch finished first
    } else {
      if (!inserted) superseded_.push_back({it->second.slot, SlotsFor(it->second.length)});
      it->second = Entry{op.slot, op.length, op.sequence};
    }
  } else {
    MarkFree(op.slot, SlotsFor(op.length));
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

void ColdStore::ReleaseSlots(uint64_t slot, uint32_t n) {
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
  MarkFree(slot, n);
}

Status ColdStore::Erase(uint64_t page_id) {
  if (!broken_.ok()) return broken_;
  auto it = index_.find(page_id);
  if (it == index_.end()) return NotFoundError("page " + std::to_string(page_id) + " not in cold tier");
  const uint64_t slot = it->second.slot;
  const uint32_t n = SlotsFor(it->second.length);
  index_.erase(it);
  ReleaseSlots(slot, n);
  UpdateUsage();
  return Status::Ok();
}

std::optional<uint64_t> ColdStore::SlotOf(uint64_t page_id) const {
  auto it = index_.find(page_id);
  if (it == index_.end()) return std::nullopt;
  return it->second.slot;
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
