#include "storage/fault_queue.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

namespace tq::storage {

FaultQueue::FaultQueue(std::unique_ptr<IoQueue> inner, uint64_t seed)
    : inner_(std::move(inner)), name_("fault(" + std::string(inner_->name()) + ")"), rng_(seed) {}

FaultQueue::~FaultQueue() {
  // Forwarded requests write into caller buffers: let them finish before the records go away.
  std::vector<IoCompletion> sink;
  if (outstanding_ > 0) Wait(&sink, outstanding_, 10'000).IgnoreError();
}

void FaultQueue::AddRule(FaultRule rule) {
  std::lock_guard lock(mu_);
  rules_.push_back(std::move(rule));
}

void FaultQueue::ClearRules() {
  std::lock_guard lock(mu_);
  rules_.clear();
}

FaultCounts FaultQueue::injected() const {
  std::lock_guard lock(mu_);
  return counts_;
}

uint32_t FaultQueue::outstanding() const {
  return outstanding_;
}

bool FaultQueue::Fires(const FaultRule& rule, IoOp op, uint64_t number) {
  if (rule.op && *rule.op != op) return false;
  if (rule.kind == FaultKind::kEnospc && op != IoOp::kWrite) return false;
  if (rule.kind == FaultKind::kShortRead && op != IoOp::kRead) return false;
  if (std::find(rule.at.begin(), rule.at.end(), number) != rule.at.end()) return true;
  if (rule.every != 0 && (number + 1) % rule.every == 0) return true;
  if (rule.probability > 0.0)
    return std::uniform_real_distribution<double>(0.0, 1.0)(rng_) < rule.probability;
  return false;
}

Status FaultQueue::Enqueue(const IoRequest& request) {
  if (outstanding_ >= inner_->depth()) return ResourceExhaustedError("io queue full");
  Record rec;
  rec.request = request;
  {
    std::lock_guard lock(mu_);
    uint64_t number = request.op == IoOp::kRead ? reads_seen_++ : writes_seen_++;
    for (const FaultRule& rule : rules_) {
      if (!Fires(rule, request.op, number)) continue;
      if (rule.kind == FaultKind::kLatency) {
        rec.latency_us += rule.latency_us;
        ++counts_.latency;
      } else if (!rec.failure) {
        rec.failure = rule.kind;
        if (request.length > 0) rec.corrupt_at = static_cast<uint32_t>(rng_() % request.length);
        switch (rule.kind) {
          case FaultKind::kEio: ++counts_.eio; break;
          case FaultKind::kEnospc: ++counts_.enospc; break;
          case FaultKind::kShortRead: ++counts_.short_read; break;
          case FaultKind::kCorrupt: ++counts_.corrupt; break;
          case FaultKind::kLatency: break;
        }
      }
    }
  }
  rec.forwarded = rec.failure != FaultKind::kEio && rec.failure != FaultKind::kEnospc;
  uint32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<uint32_t>(records_.size());
    records_.emplace_back();
  }
  if (rec.forwarded) {
    IoRequest inner = request;
    inner.user_data = id;
    Status s = inner_->Enqueue(inner);
    if (!s.ok()) {
      free_ids_.push_back(id);
      return s;
    }
    if (rec.failure == FaultKind::kCorrupt && request.op == IoOp::kWrite && request.length > 0) {
      static_cast<unsigned char*>(request.buf)[rec.corrupt_at] ^= 0xFF;  // restored in Finish
    }
  }
  records_[id] = std::move(rec);
  pending_.push_back(id);
  ++outstanding_;
  return Status::Ok();
}

Status FaultQueue::Submit() {
  auto now = Clock::now();
  std::vector<uint32_t> submitted;
  submitted.swap(pending_);
  for (uint32_t id : submitted) {
    Record& rec = records_[id];
    rec.ready = now + std::chrono::microseconds(rec.latency_us);
    if (!rec.forwarded) Finish(id, nullptr);
  }
  return inner_->Submit();
}

void FaultQueue::Finish(uint32_t id, const IoCompletion* inner) {
  Record& rec = records_[id];
  const IoRequest& r = rec.request;
  IoCompletion c{r.user_data, r.op, 0, Status::Ok()};
  if (inner == nullptr) {
    c.status = ErrnoToStatus(rec.failure == FaultKind::kEnospc ? ENOSPC : EIO,
                             r.op == IoOp::kRead ? "read (injected)" : "write (injected)");
  } else {
    c.bytes = inner->bytes;
    c.status = inner->status;
    auto* bytes = static_cast<unsigned char*>(r.buf);
    if (rec.failure == FaultKind::kCorrupt && r.length > 0) {
      bytes[rec.corrupt_at] ^= 0xFF;  // reads: corrupts what arrived; writes: restores the caller's buffer
    } else if (rec.failure == FaultKind::kShortRead && c.status.ok()) {
      uint32_t half = r.length / 2;
      std::memset(bytes + half, 0, r.length - half);
      c.bytes = half;
      c.status = CompletionStatus(IoOp::kRead, half, r.length);
    }
  }
  held_.emplace_back(id, std::move(c));
}

void FaultQueue::DrainInner() {
  std::vector<IoCompletion> got;
  inner_->Poll(&got);
  for (const IoCompletion& c : got) Finish(static_cast<uint32_t>(c.user_data), &c);
}

size_t FaultQueue::ReleaseReady(std::vector<IoCompletion>* out) {
  auto now = Clock::now();
  size_t n = 0;
  for (size_t i = 0; i < held_.size();) {
    uint32_t id = held_[i].first;
    if (records_[id].ready > now) {
      ++i;
      continue;
    }
    out->push_back(std::move(held_[i].second));
    held_[i] = std::move(held_.back());
    held_.pop_back();
    free_ids_.push_back(id);
    --outstanding_;
    ++n;
  }
  return n;
}

size_t FaultQueue::Poll(std::vector<IoCompletion>* out) {
  DrainInner();
  return ReleaseReady(out);
}

Status FaultQueue::Wait(std::vector<IoCompletion>* out, size_t min_count, int timeout_ms) {
  TQ_RETURN_IF_ERROR(Submit());
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  size_t got = Poll(out);
  while (got < min_count && outstanding_ > 0) {
    auto now = Clock::now();
    if (timeout_ms >= 0 && now >= deadline) return DeadlineExceededError("io wait timed out");
    // Sleep until the earliest held completion is due, or until the inner queue delivers one.
    std::optional<Clock::time_point> due;
    for (const auto& [id, c] : held_) due = due ? std::min(*due, records_[id].ready) : records_[id].ready;
    if (timeout_ms >= 0) due = due ? std::min(*due, deadline) : deadline;
    if (inner_->outstanding() > 0) {
      int wait_ms = -1;
      if (due) {
        wait_ms = static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(*due - now).count());
      }
      std::vector<IoCompletion> tmp;
      Status s = inner_->Wait(&tmp, 1, wait_ms);
      if (!s.ok() && s.code() != StatusCode::kDeadlineExceeded) return s;
      for (const IoCompletion& c : tmp) Finish(static_cast<uint32_t>(c.user_data), &c);
    } else if (due) {
      std::unique_lock lock(wake_mu_);
      wake_cv_.wait_until(lock, *due, [&] { return woken_; });
    }
    got += Poll(out);
    std::lock_guard lock(wake_mu_);
    if (std::exchange(woken_, false)) break;
  }
  std::lock_guard lock(wake_mu_);
  woken_ = false;
  return Status::Ok();
}

void FaultQueue::Wake() {
  {
    std::lock_guard lock(wake_mu_);
    woken_ = true;
  }
  wake_cv_.notify_all();
  inner_->Wake();
}

}  // namespace tq::storage
