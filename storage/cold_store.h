// The cold tier: pages in fixed-size slots of files in `cold_dir`, read and written through an IoQueue.
//
// Layout for streaming: a page spans ceil(PageIoBytes(length) / slot_bytes) consecutive slots (one when
// slot_payload_bytes is the largest page). Slots are grouped in runs ("extents") of about run_bytes; the pages
// of one stream (PutRequest::stream: one sequence's (layer, KV head)) fill an extent in order, so a stream's
// adjacent pages are adjacent on disk, and reads of pages that lie back to back, submitted one after another,
// go down as one I/O (up to an extent's bytes).
//
// Invariants:
//   - Every page on disk carries a header with its id, a sequence number, its length and a CRC32C (see
//     page_format.h), checked on every read; bytes reach the caller's buffer only after the check passed.
//   - A page's slots are never reused while a read of it is in flight; a page never crosses an extent.
//   - Put writes the whole new slot before the old copy of the same id is erased (header zeroed), so a crash
//     leaves at least one valid copy; at start-up the highest sequence wins.
//   - Capacity: capacity_bytes / slot_bytes slots in all; a Put that finds no free run of the slots it needs is
//     resource_exhausted.
//   - ENOSPC from fallocate or a write (or a short write) makes Put resource_exhausted and sets
//     admitting() to false; stored pages stay readable. ResumeAdmission() lets the manager try again after
//     freeing space.
//
// Threading: one thread (the KV manager's I/O thread) calls the methods; stats() and admitting() may be read,
// and WakeReads() called, from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "storage/cold_dir.h"
#include "storage/io_queue.h"
#include "storage/tier_stats.h"

namespace tq::storage {

struct ColdStoreOptions {
  std::string cold_dir;                         // created if missing
  uint64_t capacity_bytes = uint64_t{1} << 30;  // budget: whole slots on disk
  uint32_t max_page_bytes = 64 * 1024;          // largest payload
  uint32_t slot_payload_bytes = 0;  // payload one slot holds: slot = header + this, 4 KiB aligned; 0 = max_page_bytes
  uint32_t run_bytes = 256 * 1024;  // extent size aimed at (at least the largest page's slots); the largest read
  uint64_t file_bytes = uint64_t{1} << 30;      // most bytes per cold file (whole slots + the file header)
  bool direct_io = true;                        // O_DIRECT where the file system allows it
  uint32_t grow_slots = 64;  // files grow by fallocate in steps of this many slots; 0 = never
  IoQueueOptions io;         // backend and queue depth (when no queue is handed to Open)
};

// What Open found on disk.
struct ColdOpenReport {
  uint64_t pages_found = 0;    // valid pages now in the index
  uint64_t pages_dropped = 0;  // corrupt pages (bad header or checksum) dropped
  uint64_t duplicates = 0;     // older copies of a page id, erased
  uint32_t files = 0;
};

// Removes the cold files (cold-NNNN.tqc) in `cold_dir`, nothing else; OK when there are none.
Status RemoveColdFiles(const std::string& cold_dir);

class ColdStore {
 public:
  struct ReadRequest {
    uint64_t page_id = 0;
    std::span<std::byte> dest;  // receives the payload; at least the page's length
    uint64_t tag = 0;           // returned in the result
  };
  struct ReadResult {
    uint64_t tag = 0;
    uint64_t page_id = 0;
    uint32_t length = 0;  // payload bytes copied into dest (0 unless status is OK)
    Status status;        // not_found, data_loss (short read, checksum), io_error, invalid_argument
  };

  // Opens or creates the store and rebuilds the index from the files (corrupt pages dropped and counted).
  // `queue` replaces the one options.io would make (tests pass a FaultQueue); its files and buffers are set
  // here.
  static StatusOr<std::unique_ptr<ColdStore>> Open(const ColdStoreOptions& options,
                                                   std::unique_ptr<IoQueue> queue = nullptr);
  ~ColdStore();  // finishes requests in flight, syncs and closes the files
  ColdStore(const ColdStore&) = delete;
  ColdStore& operator=(const ColdStore&) = delete;

  // Stores `payload` (<= max_page_bytes) under `page_id`, replacing any earlier page with that id.
  // Synchronous.
  Status Put(uint64_t page_id, std::span<const std::byte> payload);
  struct PutRequest {
    uint64_t page_id = 0;
    std::span<const std::byte> payload;
    uint64_t stream = 0;  // pages of one stream are placed one after another on disk; 0 = none in particular
  };
  // Writes a batch with up to the queue depth in flight; one Status per request, in order. Returns when all
  // are on disk (or failed). Two requests for one page id in a batch: the later wins.
  std::vector<Status> PutMany(std::span<const PutRequest> requests);
  // Removes the page (its header on disk is zeroed). not_found if absent.
  Status Erase(uint64_t page_id);
  // Synchronous read of one page into dest; returns the payload length.
  StatusOr<uint32_t> Read(uint64_t page_id, std::span<std::byte> dest);

  // Asynchronous reads: every request yields exactly one ReadResult from PollReads/WaitReads. Requests past
  // the queue depth wait in a backlog inside the store; the batch is submitted at once. Fails only when the
  // queue itself is broken.
  Status SubmitReads(std::span<const ReadRequest> requests);
  size_t PollReads(std::vector<ReadResult>* out);
  // Blocks until min(min_count, reads outstanding) results were appended, or WakeReads was called.
  Status WaitReads(std::vector<ReadResult>* out, size_t min_count);
  // Any thread: the WaitReads blocked now (or else the next) returns early, so that its thread can submit
  // new requests (IoQueue::Wake).
  void WakeReads() { queue_->Wake(); }
  size_t reads_outstanding() const { return reads_outstanding_; }

  bool Contains(uint64_t page_id) const { return index_.count(page_id) != 0; }
  // The first slot of the page (global numbering: file * slots per file + slot in file); diagnostics, tests.
  std::optional<uint64_t> SlotOf(uint64_t page_id) const;
  // Read I/Os submitted by SubmitReads and Read (a run of adjacent pages counts once).
  uint64_t read_ios() const { return read_ios_.load(std::memory_order_relaxed); }
  std::optional<uint32_t> PageLength(uint64_t page_id) const;
  std::vector<uint64_t> PageIds() const;
  uint64_t pages() const { return index_.size(); }

  bool admitting() const { return admitting_.load(std::memory_order_relaxed); }
  void ResumeAdmission() { admitting_.store(true, std::memory_order_relaxed); }

  const TierStats& stats() const { return stats_; }
  const ColdOpenReport& open_report() const { return report_; }
  std::string_view backend() const { return queue_->name(); }
  bool direct_io() const { return direct_; }
  uint32_t slot_bytes() const { return slot_bytes_; }
  uint32_t max_page_bytes() const { return options_.max_page_bytes; }
  uint64_t slot_count() const { return total_slots_; }
  uint64_t slots_used() const { return used_slots_; }
  uint32_t extent_slots() const { return extent_slots_; }
  // Slots a page of `payload_bytes` occupies.
  uint32_t SlotsFor(uint32_t payload_bytes) const;
  // fdatasync of every file.
  Status Sync();

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    uint64_t slot = 0;    // global slot number
    uint32_t length = 0;  // payload bytes
    uint64_t sequence = 0;
  };
  enum class OpKind : uint8_t { kIdle, kRead, kWrite, kScan };
  // One page of a read op: its slot, where it lands and for whom.
  struct ReadPart {
    uint64_t page_id = 0, slot = 0, tag = 0;
    uint32_t length = 0;
    std::span<std::byte> dest;
    Clock::time_point start;
  };
  // One per staging buffer (extent_slots_ * slot_bytes_); a request's user_data is its op's index.
  struct Op {
    OpKind kind = OpKind::kIdle;
    uint64_t page_id = 0, slot = 0, tag = 0;  // kWrite, kScan (slot: the first slot written or scanned)
    uint32_t length = 0;                      // kWrite: payload bytes; kScan: bytes read
    std::vector<ReadPart> parts;              // kRead: the pages of one run of slots, in slot order
    bool sync = false;           // a Read() call waits on it: the result stays in the op, not in ready_
    uint64_t sequence = 0;       // kWrite of PutMany: the page's sequence number
    size_t result = ~size_t{0};  // kWrite of PutMany: index into batch_results_
    bool done = false;
    Status status;
  };
  struct File {
    int fd = -1;
    uint64_t allocated_slots = 0;  // slots (whole or partly) inside the file's current size
    uint64_t size_at_open = 0;     // bytes
  };
  // A run of slots_in consecutive slots of one file, filled by one stream while it owns it.
  struct Extent {
    uint32_t used = 0;    // slots taken
    uint32_t cursor = 0;  // next slot (from the extent's first) the owner appends at
    uint64_t owner = 0;   // stream appending here; 0 = none
    bool owned = false;
  };

  explicit ColdStore(const ColdStoreOptions& options) : options_(options) {}
  Status Init(std::unique_ptr<IoQueue> queue);
  // Caps the budget to what the file system holds under cold_dir (free bytes plus the cold files already
  // there), with a warning; ResourceExhausted when that is less than kMinColdBytes (a full disk).
  Status FitToFreeSpace();
  Status OpenFiles();
  Status Scan();

  uint64_t SlotOffset(uint64_t slot) const;
  uint32_t FileOf(uint64_t slot) const { return static_cast<uint32_t>(slot / slots_per_file_); }
  uint64_t ExtentOf(uint64_t slot) const;
  uint64_t ExtentFirstSlot(uint64_t extent) const;
  uint32_t ExtentSize(uint64_t extent) const;  // slots; the last extent of a file or of the budget may be short
  std::span<std::byte> Staging(uint32_t op) const;
  // Takes `n` consecutive free slots for `stream` (its extent, else a free extent, else any free run).
  std::optional<uint64_t> AllocateSlots(uint32_t n, uint64_t stream);
  bool RunFree(uint64_t first, uint32_t n) const;
  void MarkUsed(uint64_t first, uint32_t n);
  void MarkFree(uint64_t first, uint32_t n);
  // Takes a free op/staging buffer, completing requests in flight until one is free.
  StatusOr<uint32_t> AcquireOp();
  // Waits for completions (at least one) and dispatches them.
  Status Pump(size_t* completions = nullptr);
  void Dispatch(const IoCompletion& c);
  void FinishRead(Op& op, const IoCompletion& c);
  void FinishScan(Op& op, const IoCompletion& c);
  void FinishPut(Op& op, const IoCompletion& c);
  Status StartPut(const PutRequest& request, size_t result);
  void StartBacklog();
  Status EnqueueIo(uint32_t op, IoOp kind, uint64_t slot, uint32_t bytes);
  // Runs one write op to completion.
  Status WriteSlot(uint64_t slot, uint32_t bytes, uint32_t op);
  // Zeroes the header of the page at `slot` (after its reads finished) and frees its `n` slots.
  void ReleaseSlots(uint64_t slot, uint32_t n);
  // Scan: the pages in one extent's bytes (`bytes` read from its first slot).
  void ScanExtent(uint64_t first_slot, std::span<const std::byte> bytes);
  Status EnsureAllocated(uint64_t slot);
  void UpdateUsage();
  void CountError(const Status& status);

  ColdStoreOptions options_;
  ColdDirLock dir_lock_;  // held while the store lives (files close first, in ~ColdStore)
  std::unique_ptr<IoQueue> queue_;
  std::vector<File> files_;
  bool direct_ = true;
  uint32_t slot_bytes_ = 0;
  uint64_t slots_per_file_ = 0;
  uint64_t total_slots_ = 0;
  uint32_t extent_slots_ = 1;  // slots per extent (the last of a file may be short)
  uint64_t extents_per_file_ = 0;
  uint64_t used_slots_ = 0;
  std::atomic<uint64_t> read_ios_{0};  // written by the driving thread, read from any

  AlignedBuffer staging_;  // ops_.size() buffers of extent_slots_ * slot_bytes_, registered with the queue
  std::vector<Op> ops_;
  std::vector<uint32_t> free_ops_;

  std::unordered_map<uint64_t, Entry> index_;            // page id -> where it lives
  std::vector<uint8_t> slot_used_;                       // [total_slots_]: 1 = part of a page (or being written)
  std::vector<Extent> extents_;
  std::vector<uint64_t> free_extents_;                   // stack of extents with no slot used; lowest on top
  std::unordered_map<uint64_t, uint64_t> stream_extent_;  // stream -> the extent it appends to
  uint64_t search_extent_ = 0;                           // where the search for any free run goes on from
  std::unordered_map<uint64_t, uint32_t> slot_readers_;  // a page's first slot -> reads in flight
  uint64_t next_sequence_ = 1;
  std::vector<std::pair<uint64_t, uint32_t>> scan_discard_;  // (slot, slots) Scan found corrupt or superseded
  std::vector<Status>* batch_results_ = nullptr;  // PutMany's results while it runs
  size_t batch_in_flight_ = 0;                    // PutMany writes not yet completed
  std::vector<std::pair<uint64_t, uint32_t>> superseded_;  // (slot, slots) of overwritten pages, freed after a batch

  struct Waiting {
    ReadRequest request;
    Clock::time_point start;  // when SubmitReads took it: read latency counts the wait for a buffer
    bool alone = false;       // read by itself: a run it was part of failed as a whole
  };
  // Turns a request into a part of a read op; false (a result in ready_) when it cannot be read.
  bool PrepareRead(const Waiting& w, ReadPart* part);
  std::deque<Waiting> backlog_;    // reads waiting for a staging buffer
  std::vector<ReadResult> ready_;  // finished reads not yet returned
  size_t reads_outstanding_ = 0;   // submitted to SubmitReads, not yet returned

  Status broken_;  // set when the queue itself failed; returned from then on
  std::atomic<bool> admitting_{true};
  TierStats stats_;
  ColdOpenReport report_;
};

}  // namespace tq::storage
