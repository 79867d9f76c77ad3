// ColdStore start-up: files, queue, staging buffers, and the index rebuilt from the page headers.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <cstring>

#include "storage/cold_dir.h"
#include "storage/cold_store.h"
#include "storage/page_format.h"

namespace tq::storage {
namespace {

constexpr uint64_t kMaxLoggedDrops = 16;  // corrupt pages logged one by one at start-up; the rest are counted
// The least room a cold tier is worth opening with (kv.cold_bytes' own minimum): below it the disk counts as full.
constexpr uint64_t kMinColdBytes = uint64_t{1} << 20;

std::string ColdFilePath(const std::string& dir, uint32_t index) {
  char name[32];
  std::snprintf(name, sizeof(name), "cold-%04u.tqc", index);
  return (std::filesystem::path(dir) / name).string();
}

Status WriteFileHeader(int fd, uint32_t slot_bytes, uint32_t extent_slots, uint32_t index,
                       const std::string& path) {
  AlignedBuffer buf(kFileHeaderBytes);
  EncodeFileHeader(slot_bytes, extent_slots, index, {buf.data(), buf.size()});
  ssize_t n = ::pwrite(fd, buf.data(), kFileHeaderBytes, 0);
  if (n < 0) return ErrnoToStatus(errno, "write header of " + path);
  if (n != kFileHeaderBytes) return ResourceExhaustedError("short write of the header of " + path);
  return Status::Ok();
}

}  // namespace

Status RemoveColdFiles(const std::string& cold_dir) {
  std::error_code ec;
  for (uint32_t i = 0;; ++i) {
    const std::string path = ColdFilePath(cold_dir, i);
    if (!std::filesystem::exists(path, ec)) return Status::Ok();
    if (!std::filesystem::remove(path, ec)) return ErrnoToStatus(ec.value(), "remove " + path);
  }
}

StatusOr<std::unique_ptr<ColdStore>> ColdStore::Open(const ColdStoreOptions& options,
                                                     std::unique_ptr<IoQueue> queue) {
  std::unique_ptr<ColdStore> store(new ColdStore(options));
  TQ_RETURN_IF_ERROR_CTX(store->Init(std::move(queue)), "cold tier in " + options.cold_dir);
  return store;
}

ColdStore::~ColdStore() {
  while (broken_.ok() && free_ops_.size() < ops_.size()) {
    if (!Pump().ok()) break;
  }
  queue_.reset();  // before staging_: requests still in the kernel point into it
  if (Status s = Sync(); !s.ok()) spdlog::warn("cold tier: {}", s.ToString());
  for (File& f : files_) {
    if (f.fd >= 0) ::close(f.fd);
  }
}

Status ColdStore::Init(std::unique_ptr<IoQueue> queue) {
  const ColdStoreOptions& o = options_;
  if (o.cold_dir.empty()) return InvalidArgumentError("cold_dir is empty");
  if (o.max_page_bytes == 0) return InvalidArgumentError("max_page_bytes must be > 0");
  if (o.slot_payload_bytes > o.max_page_bytes) {
    return InvalidArgumentError("slot_payload_bytes " + std::to_string(o.slot_payload_bytes) +
                                " exceeds max_page_bytes " + std::to_string(o.max_page_bytes));
  }
  slot_bytes_ = PageIoBytes(o.slot_payload_bytes != 0 ? o.slot_payload_bytes : o.max_page_bytes);
  const uint32_t largest = SlotsFor(o.max_page_bytes);
  if (o.file_bytes < kFileHeaderBytes + uint64_t{largest} * slot_bytes_) {
    return InvalidArgumentError("file_bytes " + std::to_string(o.file_bytes) + " holds no page of " +
                                std::to_string(uint64_t{largest} * slot_bytes_) + " bytes");
  }
  slots_per_file_ = (o.file_bytes - kFileHeaderBytes) / slot_bytes_;
  total_slots_ = o.capacity_bytes / slot_bytes_;
  if (total_slots_ == 0) {
    return InvalidArgumentError("capacity_bytes " + std::to_string(o.capacity_bytes) +
                                " is less than one slot (" + std::to_string(slot_bytes_) + " bytes)");
  }
  // Extents of about run_bytes, at least the largest page, at most a file.
  extent_slots_ = static_cast<uint32_t>(std::min<uint64_t>(
      slots_per_file_, std::max<uint64_t>(largest, o.run_bytes / slot_bytes_)));
  extents_per_file_ = (slots_per_file_ + extent_slots_ - 1) / extent_slots_;
  TQ_RETURN_IF_ERROR(PrepareColdDir(o.cold_dir));
  TQ_RETURN_IF_ERROR(FitToFreeSpace());
  TQ_ASSIGN_OR_RETURN(dir_lock_, ColdDirLock::Lock(o.cold_dir));
  TQ_RETURN_IF_ERROR(OpenFiles());

  if (queue == nullptr) {
    TQ_ASSIGN_OR_RETURN(queue, MakeIoQueue(o.io));
  }
  queue_ = std::move(queue);
  std::vector<int> fds;
  for (const File& f : files_) fds.push_back(f.fd);
  TQ_RETURN_IF_ERROR(queue_->RegisterFiles(fds));

  const uint32_t depth = queue_->depth();
  staging_ = AlignedBuffer(uint64_t{depth} * extent_slots_ * slot_bytes_);
  ops_.assign(depth, Op{});
  for (uint32_t i = depth; i > 0; --i) free_ops_.push_back(i - 1);
  iovec region{staging_.data(), staging_.size()};
  TQ_RETURN_IF_ERROR(queue_->RegisterBuffers({&region, 1}));

  stats_.SetCapacity(o.capacity_bytes);
  TQ_RETURN_IF_ERROR(Scan());
  UpdateUsage();
  spdlog::info(
      "cold tier: {} pages in {} files under {} ({} dropped as corrupt), backend {}, {} I/O, depth {}",
      report_.pages_found, report_.files, o.cold_dir, report_.pages_dropped, queue_->name(),
      direct_ ? "O_DIRECT" : "buffered", depth);
  return Status::Ok();
}

Status ColdStore::FitToFreeSpace() {
  const std::string& dir = options_.cold_dir;
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0) return ErrnoToStatus(errno, "statvfs " + dir);
  const uint64_t free_bytes = uint64_t{fs.f_bavail} * fs.f_frsize;
  uint64_t ours = 0;  // bytes the files of an earlier run hold: reused in place
  for (uint32_t i = 0;; ++i) {
    struct stat st {};
    if (::lstat(ColdFilePath(dir, i).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) break;
    ours += uint64_t{static_cast<uint64_t>(st.st_blocks)} * 512;
  }
  const uint64_t usable = free_bytes + ours;
  const uint64_t files = (total_slots_ + slots_per_file_ - 1) / slots_per_file_;
  const uint64_t needed = files * kFileHeaderBytes + total_slots_ * slot_bytes_;
  if (usable >= needed) return Status::Ok();
  const uint64_t floor = std::max<uint64_t>(kMinColdBytes, kFileHeaderBytes + uint64_t{SlotsFor(options_.max_page_bytes)} * slot_bytes_);
  if (usable < floor) {
    return ResourceExhaustedError("the file system under " + dir + " is full: " + std::to_string(usable) +
                                  " bytes free, the cold tier needs at least " + std::to_string(floor));
  }
  const uint64_t slots = (usable - files * kFileHeaderBytes) / slot_bytes_;
  spdlog::warn("cold tier: kv.cold_bytes is {} MiB but the file system under {} has {} MiB free; the cold tier "
               "uses {} MiB", options_.capacity_bytes >> 20, dir, usable >> 20, (slots * slot_bytes_) >> 20);
  total_slots_ = slots;
  options_.capacity_bytes = slots * slot_bytes_;
  return Status::Ok();
}

Status ColdStore::OpenFiles() {
  const auto count = static_cast<uint32_t>((total_slots_ + slots_per_file_ - 1) / slots_per_file_);
  for (uint32_t i = 0; i < count; ++i) {
    const std::string path = ColdFilePath(options_.cold_dir, i);
    TQ_ASSIGN_OR_RETURN(IoFile io, OpenIoFile(path, /*create=*/true, options_.direct_io));
    files_.push_back(File{io.fd, 0});
    direct_ = direct_ && io.direct;
    struct stat st {};
    if (::fstat(io.fd, &st) != 0) return ErrnoToStatus(errno, "stat " + path);
    bool fresh = st.st_size < static_cast<off_t>(kFileHeaderBytes);
    if (!fresh) {
      AlignedBuffer buf(kFileHeaderBytes);
      ssize_t n = ::pread(io.fd, buf.data(), kFileHeaderBytes, 0);
      if (n != static_cast<ssize_t>(kFileHeaderBytes)) {
        return n < 0 ? ErrnoToStatus(errno, "read header of " + path)
                     : DataLossError("short header in " + path);
      }
      StatusOr<FileHeader> h = DecodeFileHeader({buf.data(), buf.size()});
      if (!h.ok() && h.status().code() == StatusCode::kFailedPrecondition) {
        return std::move(h).status().WithContext(path + "; use another cold_dir or delete its files");
      }
      if (h.ok() && (h->slot_bytes != slot_bytes_ || h->extent_slots != extent_slots_)) {
        return FailedPreconditionError(path + " has slots of " + std::to_string(h->slot_bytes) + " bytes in runs of " +
                                       std::to_string(h->extent_slots) + " but this configuration uses " +
                                       std::to_string(slot_bytes_) + " in runs of " + std::to_string(extent_slots_) +
                                       "; use another cold_dir or delete its files");
      }
      if (!h.ok() || h->file_index != i) {
        spdlog::error("cold tier: {} has a damaged header ({}); dropping the whole file", path,
                      h.ok() ? "wrong file index" : h.status().ToString());
        stats_.RecordError(TierError::kDroppedAtOpen);
        if (::ftruncate(io.fd, 0) != 0) return ErrnoToStatus(errno, "truncate " + path);
        fresh = true;
      }
    }
    if (fresh) {
      TQ_RETURN_IF_ERROR(WriteFileHeader(io.fd, slot_bytes_, extent_slots_, i, path));
      continue;
    }
    // A file grown by writes alone ends with a partly written slot: it counts, and Scan reads what exists.
    uint64_t body = static_cast<uint64_t>(st.st_size) - kFileHeaderBytes;
    files_.back().allocated_slots = std::min((body + slot_bytes_ - 1) / slot_bytes_, slots_per_file_);
    files_.back().size_at_open = static_cast<uint64_t>(st.st_size);
  }
  report_.files = count;
  return Status::Ok();
}

void ColdStore::FinishScan(Op& op, const IoCompletion& c) {
  const auto index = static_cast<uint32_t>(&op - ops_.data());
  if (c.status.ok()) {
    ScanExtent(op.slot, Staging(index).first(std::min(op.length, c.bytes)));
  } else {
    // The extent cannot be read: whatever it held is lost to this run; its slots count as free.
    ++report_.pages_dropped;
    stats_.RecordError(TierError::kDroppedAtOpen);
    spdlog::warn("cold tier: cannot read slots {}.. of {}: {}", op.slot % slots_per_file_,
                 ColdFilePath(options_.cold_dir, FileOf(op.slot)), c.status.ToString());
  }
  op.kind = OpKind::kIdle;
  free_ops_.push_back(index);
}

void ColdStore::ScanExtent(uint64_t first_slot, std::span<const std::byte> bytes) {
  // Where no page spans slots, any non-empty slot that is not a valid page is damage; otherwise a slot after an
  // erased page may still hold that page's payload, which is free space, not damage.
  const bool spans = SlotsFor(options_.max_page_bytes) > 1;
  const uint64_t slots = bytes.size() / slot_bytes_ + (bytes.size() % slot_bytes_ != 0 ? 1 : 0);
  for (uint64_t i = 0; i < slots;) {
    const uint64_t slot = first_slot + i;
    StatusOr<PageHeader> header = DecodePage(bytes.subspan(i * slot_bytes_), options_.max_page_bytes);
    if (!header.ok() && header.status().code() == StatusCode::kNotFound) {  // empty slot
      ++i;
      continue;
    }
    if (!header.ok()) {
      uint32_t magic = 0;
      std::memcpy(&magic, bytes.data() + i * slot_bytes_, sizeof(magic));
      if (spans && magic != kPageMagic) {
        ++i;
        continue;
      }
      ++report_.pages_dropped;
      stats_.RecordError(TierError::kDroppedAtOpen);
      if (report_.pages_dropped <= kMaxLoggedDrops) {
        spdlog::warn("cold tier: dropping slot {} of {}: {}", slot % slots_per_file_,
                     ColdFilePath(options_.cold_dir, FileOf(slot)), header.status().ToString());
      }
      scan_discard_.push_back({slot, 1});
      ++i;
      continue;
    }
    const uint32_t n = SlotsFor(header->length);
    i += n;
    next_sequence_ = std::max(next_sequence_, header->sequence + 1);
    auto [it, inserted] = index_.try_emplace(header->page_id, Entry{slot, header->length, header->sequence});
    if (inserted) continue;
    ++report_.duplicates;
    if (header->sequence > it->second.sequence) {
      scan_discard_.push_back({it->second.slot, SlotsFor(it->second.length)});
      it->second = Entry{slot, header->length, header->sequence};
    } else {
      scan_discard_.push_back({slot, n});
    }
  }
}

Status ColdStore::Scan() {
  extents_.assign(ExtentOf(total_slots_ - 1) + 1, Extent{});
  slot_used_.assign(total_slots_, 0);
  for (uint64_t x = 0; x < extents_.size(); ++x) {
    const uint64_t first = ExtentFirstSlot(x);
    const File& f = files_[FileOf(first)];
    if (first % slots_per_file_ >= f.allocated_slots) continue;
    const uint64_t present = f.size_at_open - SlotOffset(first);
    const auto bytes = static_cast<uint32_t>(
        std::min<uint64_t>(uint64_t{ExtentSize(x)} * slot_bytes_, AlignUp(present, kIoAlignment)));
    TQ_ASSIGN_OR_RETURN(uint32_t op, AcquireOp());
    ops_[op].kind = OpKind::kScan;
    ops_[op].slot = first;
    ops_[op].length = bytes;
    TQ_RETURN_IF_ERROR(EnqueueIo(op, IoOp::kRead, first, bytes));
  }
  while (free_ops_.size() < ops_.size()) TQ_RETURN_IF_ERROR(Pump());

  for (const auto& [id, entry] : index_) MarkUsed(entry.slot, SlotsFor(entry.length));
  for (auto [slot, n] : scan_discard_) MarkUsed(slot, n);
  for (uint64_t x = extents_.size(); x > 0; --x) {
    if (extents_[x - 1].used == 0) free_extents_.push_back(x - 1);
  }
  // Zero the headers of corrupt and superseded copies so they are neither logged nor revived again.
  for (auto [slot, n] : scan_discard_) ReleaseSlots(slot, n);
  scan_discard_.clear();
  report_.pages_found = index_.size();
  return broken_;
}

}  // namespace tq::storage
