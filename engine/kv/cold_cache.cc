#include "engine/kv/cold_cache.h"

#include <spdlog/spdlog.h>

#include <cassert>
#include <chrono>

namespace tq::engine {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

ColdPageCache::ColdPageCache(std::unique_ptr<storage::ColdStore> store, uint64_t capacity_bytes)
    : store_(std::move(store)), capacity_(capacity_bytes), spare_(std::make_shared<SparePool>()) {
  spare_->limit = std::min<uint64_t>(capacity_ / 4, 16 << 20);
  io_thread_ = std::thread([this] { IoLoop(); });
}

ColdPageCache::~ColdPageCache() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  io_cv_.notify_all();
  io_thread_.join();
}

void ColdPageCache::Write(PageId id, PageBuffer bytes, uint64_t stream) {
  auto shared = std::make_shared<const PageBuffer>(std::move(bytes));
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(id);
    if (it != entries_.end() && it->second.state == State::kReady) {
      cached_bytes_ -= it->second.bytes->size();
      ListOf(it->second).erase(it->second.lru);
    }
    Entry& e = entries_[id];
    e.state = State::kWriting;
    e.bytes = shared;
    e.wait.reset();
    cached_bytes_ += shared->size();
    ops_.push_back({OpKind::kWrite, id, std::move(shared), nullptr, stream});
  }
  io_cv_.notify_one();
}

void ColdPageCache::Erase(PageId id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(id);
    if (it != entries_.end()) {
      if (it->second.state != State::kReading) cached_bytes_ -= it->second.bytes->size();
      if (it->second.state == State::kReady) ListOf(it->second).erase(it->second.lru);
      entries_.erase(it);
      removals_.fetch_add(1, std::memory_order_release);
    }
    ops_.push_back({OpKind::kErase, id, nullptr, nullptr});
  }
  io_cv_.notify_one();
}

void ColdPageCache::StartReadLocked(PageId id) {
  Entry& e = entries_[id];
  e.state = State::kReading;
  e.order = next_order_++;
  e.bytes.reset();
  e.wait = std::make_shared<ReadWait>();
  ops_.push_back({OpKind::kRead, id, nullptr, e.wait});
}

void ColdPageCache::Prefetch(std::span<const PageId> ids) {
  size_t started = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (PageId id : ids) {
      if (entries_.count(id) != 0) continue;
      StartReadLocked(id);
      ++started;
    }
  }
  // Not woken out of a wait for completions: read-ahead joins the batch submitted at the next completion,
  // where more adjacent pages merge into one read (measured: waking for every Prefetch made reads smaller and
  // decode slower).
  if (started > 0) io_cv_.notify_one();
}

void ColdPageCache::TouchLocked(Entry& e) {
  if (e.state != State::kReady) return;
  // A page just read by attention is needed again only a whole step later, after every other page of the
  // sequence: it goes to the eviction end of the used pages (a cyclic scan keeps what fits of the working set
  // instead of evicting each page just before it is needed, as LRU would).
  used_.splice(used_.end(), ListOf(e), e.lru);  // moves the node: no allocation on the hit path
  e.used = true;
}

StatusOr<PageBytes> ColdPageCache::Get(PageId id) {
  PageBytes bytes;
  TQ_RETURN_IF_ERROR(GetMany(std::span<const PageId>(&id, 1), std::span<PageBytes>(&bytes, 1)));
  return bytes;
}

Status ColdPageCache::GetMany(std::span<const PageId> ids, std::span<PageBytes> out) {
  assert(out.size() == ids.size());
  struct Waiting {
    size_t index;
    std::shared_ptr<ReadWait> wait;
  };
  thread_local std::vector<Waiting> waiting;
  waiting.clear();
  std::unique_lock<std::mutex> lock(mu_);
  bool started = false, queued_late = false;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = entries_.find(ids[i]);
    if (it != entries_.end() && it->second.state != State::kReading) {
      ++stats_.prefetch_hits;
      TouchLocked(it->second);
      out[i] = it->second.bytes;
      continue;
    }
    out[i].reset();
    if (it != entries_.end()) {
      ++stats_.prefetch_late;
      waiting.push_back({i, it->second.wait});
      queued_late = true;
    } else {
      ++stats_.misses;
      StartReadLocked(ids[i]);
      waiting.push_back({i, entries_[ids[i]].wait});
      started = true;
    }
  }
  if (waiting.empty()) return Status::Ok();
  if (started) io_cv_.notify_one();
  // The I/O thread may sleep in the kernel until a read in flight completes, where io_cv_ does not reach;
  // these reads are waited for now (a read-ahead may still be queued behind that wait: read-ahead does not
  // wake it). Under mu_: WakeReads only writes an eventfd or sets a flag.
  if (io_waiting_ && (started || (queued_late && !ops_.empty()))) store_->WakeReads();
  const Clock::time_point start = Clock::now();
  done_cv_.wait(lock, [&] {
    for (const Waiting& w : waiting) {
      if (!w.wait->done) return false;
    }
    return true;
  });
  stats_.stall_ns += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
  Status first = Status::Ok();
  for (const Waiting& w : waiting) {
    if (!w.wait->status.ok()) {
      if (first.ok()) first = w.wait->status;
      continue;
    }
    out[w.index] = w.wait->bytes;
    if (auto done = entries_.find(ids[w.index]); done != entries_.end())
      TouchLocked(done->second);  // used now
  }
  waiting.clear();  // drops the ReadWaits: a page just read no longer looks pinned to eviction
  return first;
}

std::vector<ColdPageCache::FailedWrite> ColdPageCache::TakeFailedWrites() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<FailedWrite> out;
  out.swap(failed_writes_);
  return out;
}

void ColdPageCache::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return ops_.empty() && ops_running_ == 0; });
}

ColdCacheStats ColdPageCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  ColdCacheStats s = stats_;
  s.cached_bytes = cached_bytes_;
  s.cached_pages = entries_.size();
  s.read_ios = store_->read_ios();
  return s;
}

void ColdPageCache::FinishReadLocked(PageId id, const std::shared_ptr<ReadWait>& wait, PageBytes bytes,
                                     Status status) {
  wait->done = true;
  wait->bytes = bytes;
  wait->status = status;
  auto it = entries_.find(id);
  // The entry may have been erased (or erased and read again) while the read was in flight.
  if (it == entries_.end() || it->second.wait != wait) return;
  if (!status.ok()) {
    ++stats_.read_failures;
    entries_.erase(it);
    removals_.fetch_add(1, std::memory_order_release);
    return;
  }
  Entry& e = it->second;
  e.state = State::kReady;
  e.bytes = std::move(bytes);
  e.wait.reset();
  cached_bytes_ += e.bytes->size();
  // In the order the reads were asked for (completions may come in any order): the back is needed last.
  e.used = false;
  auto pos = unused_.end();
  while (pos != unused_.begin() && entries_.at(*std::prev(pos)).order > e.order) --pos;
  e.lru = unused_.insert(pos, id);
}

void ColdPageCache::EvictLocked() {
  // The used pages first, the one used last first; then pages read and not used yet, the one read last first
  // (read-ahead asks in the order of use, so it is needed last). A page a reader still holds (use_count counts
  // the cache's own reference as one) is pinned: it moves to the other end of its list, so the next eviction
  // does not walk over it again (the pages attention holds are the ones it used last, at the back).
  for (std::list<PageId>* list : {&used_, &unused_}) {
    size_t pinned = 0;
    while (cached_bytes_ > capacity_ && pinned < list->size()) {
      const PageId id = list->back();
      auto e = entries_.find(id);
      if (e->second.bytes.use_count() > 1) {
        list->splice(list->begin(), *list, std::prev(list->end()));
        ++pinned;
        continue;
      }
      cached_bytes_ -= e->second.bytes->size();
      list->pop_back();
      entries_.erase(e);
      removals_.fetch_add(1, std::memory_order_release);
      ++stats_.evictions;
    }
  }
  if (cached_bytes_ > capacity_) blocked_evictions_.fetch_add(1, std::memory_order_release);
}

void ColdPageCache::Recycle::operator()(PageBuffer* buf) const {
  std::unique_ptr<PageBuffer> owned(buf);
  std::lock_guard<std::mutex> lock(pool->mu);
  if (pool->bytes + buf->size() > pool->limit) return;
  pool->bytes += buf->size();
  pool->by_size[buf->size()].push_back(std::move(owned));
}

std::shared_ptr<PageBuffer> ColdPageCache::TakeSpare(size_t n) {
  std::unique_ptr<PageBuffer> buf;
  {
    std::lock_guard<std::mutex> lock(spare_->mu);
    auto it = spare_->by_size.find(n);
    if (it != spare_->by_size.end() && !it->second.empty()) {
      buf = std::move(it->second.back());
      it->second.pop_back();
      spare_->bytes -= n;
    }
  }
  if (buf == nullptr) buf = std::make_unique<PageBuffer>(n);
  return std::shared_ptr<PageBuffer>(buf.release(), Recycle{spare_});
}

void ColdPageCache::IoLoop() {
  struct PendingRead {
    PageId id;
    std::shared_ptr<ReadWait> wait;
    std::shared_ptr<PageBuffer> buf;
  };
  std::unordered_map<uint64_t, PendingRead> pending;  // tag -> read in flight
  uint64_t next_tag = 1;
  std::vector<storage::ColdStore::ReadResult> results;
  for (;;) {
    std::deque<Op> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      io_cv_.wait(lock, [&] { return stop_ || !ops_.empty() || !pending.empty(); });
      if (stop_ && ops_.empty() && pending.empty()) return;
      batch.swap(ops_);
      ops_running_ = batch.size();
    }
    // In order; consecutive writes go down as one batch, consecutive reads as one submission.
    while (!batch.empty()) {
      const OpKind kind = batch.front().kind;
      if (kind == OpKind::kWrite) {
        std::vector<Op> writes;
        while (!batch.empty() && batch.front().kind == OpKind::kWrite) {
          writes.push_back(std::move(batch.front()));
          batch.pop_front();
        }
        std::vector<storage::ColdStore::PutRequest> puts;
        for (const Op& op : writes) {
          puts.push_back({Raw(op.id), std::as_bytes(std::span<const uint8_t>(*op.bytes)), op.stream});
        }
        const std::vector<Status> put_status = store_->PutMany(puts);
        std::lock_guard<std::mutex> lock(mu_);
        for (size_t i = 0; i < writes.size(); ++i) {
          auto it = entries_.find(writes[i].id);
          const bool current = it != entries_.end() && it->second.state == State::kWriting &&
                               it->second.bytes == writes[i].bytes;
          if (!put_status[i].ok()) {
            ++stats_.write_failures;
            // The entry stays (readable, never evicted) until the manager re-homes the page and erases it.
            if (current) failed_writes_.push_back({writes[i].id, writes[i].bytes, put_status[i]});
            continue;
          }
          if (!current) continue;
          // A page just written is needed at the next step: after the pages used this step, before the ones
          // read ahead.
          it->second.state = State::kReady;
          it->second.used = true;
          used_.push_front(writes[i].id);
          it->second.lru = used_.begin();
        }
        for (Op& op : writes) op.bytes.reset();  // the cache's reference is the only one left: evictable
        EvictLocked();
      } else if (kind == OpKind::kErase) {
        const PageId id = batch.front().id;
        batch.pop_front();
        const Status s = store_->Erase(Raw(id));
        if (!s.ok() && s.code() != StatusCode::kNotFound) spdlog::warn("cold tier: erase of page {}: {}", Raw(id), s.ToString());
        // Space came back: a tier that hit ENOSPC may admit again (the next write tells).
        if (s.ok() && !store_->admitting()) store_->ResumeAdmission();
      } else {
        std::vector<storage::ColdStore::ReadRequest> reads;
        std::vector<std::pair<std::shared_ptr<ReadWait>, Status>> refused;
        std::vector<PageId> refused_ids;
        while (!batch.empty() && batch.front().kind == OpKind::kRead) {
          Op op = std::move(batch.front());
          batch.pop_front();
          const std::optional<uint32_t> length = store_->PageLength(Raw(op.id));
          if (!length) {
            refused.push_back({op.wait, NotFoundError("cold page " + std::to_string(Raw(op.id)) + " is not on disk")});
            refused_ids.push_back(op.id);
            continue;
          }
          std::shared_ptr<PageBuffer> buf = TakeSpare(*length);
          const uint64_t tag = next_tag++;
          reads.push_back({Raw(op.id), std::as_writable_bytes(std::span<uint8_t>(*buf)), tag});
          pending[tag] = {op.id, op.wait, std::move(buf)};
        }
        const Status s = store_->SubmitReads(reads);
        std::lock_guard<std::mutex> lock(mu_);
        if (!s.ok()) {
          for (const auto& r : reads) {
            PendingRead p = std::move(pending[r.tag]);
            pending.erase(r.tag);
            FinishReadLocked(p.id, p.wait, nullptr, s);
          }
        }
        for (size_t i = 0; i < refused.size(); ++i) {
          FinishReadLocked(refused_ids[i], refused[i].first, nullptr, refused[i].second);
        }
      }
    }
    // Completions: whatever is ready; when nothing new is queued, wait for at least one.
    results.clear();
    if (!pending.empty()) {
      store_->PollReads(&results);
      bool idle = false;
      if (results.empty()) {
        std::lock_guard<std::mutex> lock(mu_);
        idle = ops_.empty();
        io_waiting_ = idle;  // from here on, whoever queues an op wakes the wait below
      }
      if (idle) {
        const Status s = store_->WaitReads(&results, 1);
        {
          std::lock_guard<std::mutex> lock(mu_);
          io_waiting_ = false;
        }
        if (!s.ok()) {
          // The queue itself broke: every read in flight fails (the sequences recompute), none waits forever.
          spdlog::error("cold tier: waiting for reads: {}", s.ToString());
          std::lock_guard<std::mutex> lock(mu_);
          for (auto& [tag, p] : pending) FinishReadLocked(p.id, p.wait, nullptr, s);
          pending.clear();
        }
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (storage::ColdStore::ReadResult& r : results) {
        auto p = pending.find(r.tag);
        if (p == pending.end()) continue;
        PageBytes bytes;
        if (r.status.ok()) {
          p->second.buf->resize(r.length);
          bytes = std::move(p->second.buf);
        }
        FinishReadLocked(p->second.id, p->second.wait, std::move(bytes), r.status);
        pending.erase(p);
      }
      // Only now: until its ReadWait is gone (unless a Get waits for it), a page just read looks pinned.
      if (!results.empty()) EvictLocked();
      ops_running_ = 0;
    }
    done_cv_.notify_all();
  }
}

}  // namespace tq::engine
