// The cold tier as the KV manager sees it: a storage::ColdStore driven by one I/O thread, in front of it a
// bounded RAM cache of cold pages that attention reads from.
//
// Flow: Write() puts a page's bytes in the cache (pinned: not evictable) and queues the write; once on disk the
// entry becomes clean and evictable. Prefetch() queues reads of pages not in the cache; Get() returns the bytes,
// waiting for a read in flight or issuing one (a stall). Operations on one page id reach the disk in the order
// they were called (one FIFO), so an Erase after a Write never races it. Eviction takes the page Get returned
// last first, then pages written, and pages read but not used yet only when nothing else is left, the one read
// last first: decode scans a sequence's pages cyclically and reads them ahead in that order, and this keeps
// what fits of them where least-recently-used would keep nothing, and never drops a page read ahead for one
// read later.
//
// Invariants:
//   - Bytes reach a reader only after the store verified the page's checksum (ColdStore::Read* contract).
//   - A failed read is returned to every waiter and not cached: the next Get retries.
//   - A failed write (ENOSPC, EIO, over budget) is handed back through TakeFailedWrites(); its bytes stay
//     readable in the cache until the KV manager re-homes the page and calls Erase. Nothing is lost.
//   - Cached bytes <= capacity, except pages pinned by a writer or a reader (use_count > 1) and pages still
//     being written, which are never evicted.
//
// Threading: every method may be called from any thread; the ColdStore is touched only by the I/O thread (but
// for WakeReads, with which a miss in Get ends the I/O thread's wait for completions).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/kv/page_info.h"
#include "engine/kv/stats.h"
#include "storage/cold_store.h"

namespace tq::engine {

class ColdPageCache {
 public:
  ColdPageCache(std::unique_ptr<storage::ColdStore> store, uint64_t capacity_bytes);
  ~ColdPageCache();  // finishes queued writes, then stops the I/O thread
  ColdPageCache(const ColdPageCache&) = delete;
  ColdPageCache& operator=(const ColdPageCache&) = delete;

  // Queues the page for the disk; its bytes are readable from the cache at once. Pages of one stream are
  // placed next to each other on disk (storage::ColdStore::PutRequest::stream).
  void Write(PageId id, PageBuffer bytes, uint64_t stream = 0);
  // Drops the page from the cache and queues its erasure on disk.
  void Erase(PageId id);
  // Queues reads of the pages not cached nor in flight.
  void Prefetch(std::span<const PageId> ids);
  // The page's bytes (they stay valid while the caller holds them). data_loss / io_error / not_found when the
  // read failed.
  StatusOr<PageBytes> Get(PageId id);
  // out[i] = the bytes of ids[i] (out.size() == ids.size()), under one lock for all the pages found ready;
  // the others are read (or their reads in flight waited for) together. The first failed read's status, with
  // the out entries of failed pages null. Attention pins a head's pages of a layer this way: one Get per page
  // made two workers contend for the lock on every page (half the Gets of a 2-thread decode slept in the
  // kernel).
  Status GetMany(std::span<const PageId> ids, std::span<PageBytes> out);

  struct FailedWrite {
    PageId id = kNoPage;
    PageBytes bytes;
    Status status;
  };
  // Writes that failed since the last call, oldest first.
  std::vector<FailedWrite> TakeFailedWrites();

  // Blocks until every queued operation reached the disk (tests, shutdown).
  void Flush();
  ColdCacheStats stats() const;
  // Pages that left the cache so far (evicted, erased, failed reads); any thread. While it stays the same,
  // every page that was cached (or being read) is still.
  uint64_t removals() const { return removals_.load(std::memory_order_acquire); }
  // Times eviction stopped above the capacity because readers hold the pages it would take; any thread.
  // Whoever keeps pages pinned from one use to the next lets go when it changes.
  uint64_t blocked_evictions() const { return blocked_evictions_.load(std::memory_order_acquire); }
  const storage::ColdStore& store() const { return *store_; }
  // False once the disk refused space (ENOSPC); the manager stops placing pages here.
  bool admitting() const { return store_->admitting(); }
  uint64_t capacity_bytes() const { return capacity_; }

 private:
  enum class State : uint8_t { kWriting, kReading, kReady };
  // One read in flight; every Get waiting for it holds this and sleeps on done_cv_ until `done`.
  struct ReadWait {
    bool done = false;
    PageBytes bytes;
    Status status;
  };
  struct Entry {
    State state = State::kReady;
    PageBytes bytes;                 // kWriting, kReady: the page; kReading: null
    std::shared_ptr<ReadWait> wait;  // kReading
    bool used = false;               // kReady: in used_ (read by Get, or written), else in unused_
    uint64_t order = 0;              // when its read was asked for (next_order_)
    std::list<PageId>::iterator lru;
  };
  enum class OpKind : uint8_t { kWrite, kErase, kRead };
  struct Op {
    OpKind kind;
    PageId id;
    PageBytes bytes;                 // kWrite
    std::shared_ptr<ReadWait> wait;  // kRead
    uint64_t stream = 0;             // kWrite
  };

  void IoLoop();
  // Under mu_: queues a read of `id` and marks it kReading.
  void StartReadLocked(PageId id);
  // Hands the outcome to the waiters and caches the bytes; the caller evicts (EvictLocked) once the read's
  // bookkeeping let go of its ReadWait.
  void FinishReadLocked(PageId id, const std::shared_ptr<ReadWait>& wait, PageBytes bytes, Status status);
  void TouchLocked(Entry& e);
  std::list<PageId>& ListOf(const Entry& e) { return e.used ? used_ : unused_; }
  void EvictLocked();
  // Buffers of read pages that nobody holds any more, kept for the next reads of the same size: a read then
  // neither allocates nor zero-fills (both showed in decode profiles with a cache smaller than the working set).
  // At most `limit` bytes are kept. A buffer comes back through its shared_ptr's deleter, run by whoever lets go
  // of it last (the cache evicting it, or a reader unpinning it after), under the pool's lock: every reader's last
  // access happens before the next read writes it. (Deciding by use_count() == 1 in the cache did not order them:
  // use_count() is a relaxed load, and ThreadSanitizer saw a read fill a buffer attention had just read.)
  struct SparePool {
    std::mutex mu;
    std::unordered_map<size_t, std::vector<std::unique_ptr<PageBuffer>>> by_size;
    uint64_t bytes = 0;
    uint64_t limit = 0;
  };
  struct Recycle {
    std::shared_ptr<SparePool> pool;
    void operator()(PageBuffer* buf) const;
  };
  std::shared_ptr<PageBuffer> TakeSpare(size_t n);  // a buffer of n bytes that returns to spare_ when let go

  std::unique_ptr<storage::ColdStore> store_;
  const uint64_t capacity_;

  mutable std::mutex mu_;
  std::condition_variable io_cv_;    // the I/O thread waits for ops
  std::condition_variable done_cv_;  // readers wait for reads; Flush waits for the queue
  std::deque<Op> ops_;
  size_t ops_running_ = 0;  // taken by the I/O thread, not yet done
  std::atomic<uint64_t> removals_{0};  // bumped under mu_ at every entries_ erase
  std::atomic<uint64_t> blocked_evictions_{0};  // bumped under mu_ (EvictLocked)
  bool io_waiting_ = false;  // the I/O thread found ops_ empty and waits (or is about to) for completions;
                             // a miss in Get wakes it (ColdStore::WakeReads)
  std::unordered_map<PageId, Entry> entries_;
  // kReady entries in eviction order, each list evicted from its back, used_ before unused_ (EvictLocked).
  std::list<PageId> used_;    // read by Get (the last one at the back) or written (at the front)
  std::list<PageId> unused_;  // read from disk and not yet used, in the order the reads were asked for
  uint64_t next_order_ = 0;
  uint64_t cached_bytes_ = 0;
  std::shared_ptr<SparePool> spare_;  // shared with the deleters of the buffers it lent
  std::vector<FailedWrite> failed_writes_;
  ColdCacheStats stats_;
  bool stop_ = false;
  std::thread io_thread_;
};

}  // namespace tq::engine
