// A fault-injecting IoQueue for tests: wraps a real backend and makes chosen requests fail or slow down.
//
// Each request is numbered per op kind (the first read is read 0, the first write is write 0). A rule fires
// for a request when its number is listed in `at`, when (number + 1) is a multiple of `every`, or with
// `probability` (drawn from a generator seeded at construction, so runs repeat). What a firing rule does:
//   kEio       the request is not performed; it completes with EIO (io_error).
//   kEnospc    writes only: not performed; completes with ENOSPC (resource_exhausted), as cqe res = -ENOSPC.
//   kShortRead reads only: performed, then reported as half read (data_loss); the unread half is zeroed.
//   kCorrupt   reads: performed, then one byte of the buffer is flipped. Writes: one byte is flipped before
//              the write and restored after it: the file holds corrupt bytes, the caller's buffer does not.
//   kLatency   performed; the completion is held back `latency_us` microseconds after submission.
// The first matching failure rule wins; latency rules add up and also apply to failed requests.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <vector>

#include "storage/io_queue.h"

namespace tq::storage {

enum class FaultKind : uint8_t { kEio, kEnospc, kShortRead, kCorrupt, kLatency };

struct FaultRule {
  FaultKind kind = FaultKind::kEio;
  std::optional<IoOp> op;    // which ops it applies to; nullopt = reads and writes
  std::vector<uint64_t> at;  // op numbers that fault
  uint64_t every = 0;        // 0 = off
  double probability = 0.0;  // in [0, 1]
  uint32_t latency_us = 0;   // kLatency only
};

struct FaultCounts {
  uint64_t eio = 0, enospc = 0, short_read = 0, corrupt = 0, latency = 0;
};

class FaultQueue final : public IoQueue {
 public:
  FaultQueue(std::unique_ptr<IoQueue> inner, uint64_t seed);
  ~FaultQueue() override;

  // Rules may change between requests (e.g. "the disk fills now"); they apply to requests enqueued
  // afterwards.
  void AddRule(FaultRule rule);
  void ClearRules();
  FaultCounts injected() const;

  std::string_view name() const override { return name_; }
  uint32_t depth() const override { return inner_->depth(); }
  uint32_t outstanding() const override;
  Status RegisterFiles(std::span<const int> fds) override { return inner_->RegisterFiles(fds); }
  Status RegisterBuffers(std::span<const iovec> regions) override { return inner_->RegisterBuffers(regions); }
  Status Enqueue(const IoRequest& request) override;
  Status Submit() override;
  size_t Poll(std::vector<IoCompletion>* out) override;
  Status Wait(std::vector<IoCompletion>* out, size_t min_count, int timeout_ms = -1) override;
  void Wake() override;

 private:
  using Clock = std::chrono::steady_clock;
  struct Record {
    IoRequest request;
    std::optional<FaultKind> failure;  // kEio, kEnospc, kShortRead or kCorrupt
    uint32_t latency_us = 0;
    uint32_t corrupt_at = 0;  // byte offset flipped for kCorrupt
    bool forwarded = false;   // handed to the inner queue
    Clock::time_point ready;  // earliest time the completion may be returned
  };

  bool Fires(const FaultRule& rule, IoOp op, uint64_t number);
  // Turns an inner completion (or a not-forwarded record) into the caller's completion and parks it until
  // ready.
  void Finish(uint32_t id, const IoCompletion* inner);
  size_t ReleaseReady(std::vector<IoCompletion>* out);
  void DrainInner();

  std::unique_ptr<IoQueue> inner_;
  std::string name_;
  mutable std::mutex mu_;  // guards rules_, rng_ and counts_ (set from a test thread)
  std::vector<FaultRule> rules_;
  std::mt19937_64 rng_;
  FaultCounts counts_;
  uint64_t reads_seen_ = 0, writes_seen_ = 0;
  std::vector<Record> records_;  // indexed by id, the inner request's user_data
  std::vector<uint32_t> free_ids_;
  std::vector<uint32_t> pending_;                        // enqueued, not yet submitted
  std::vector<std::pair<uint32_t, IoCompletion>> held_;  // finished, waiting for their ready time
  uint32_t outstanding_ = 0;
  std::mutex wake_mu_;
  std::condition_variable wake_cv_;  // a Wait sleeping until a held completion is due
  bool woken_ = false;               // guarded by wake_mu_
};

}  // namespace tq::storage
