// The time limit of one generation request: the server's limits.request_timeout_s counted from the request's
// arrival (queue time included) and, for gRPC, the client's own deadline, whichever comes first. The front end
// polls it between events and aborts the request in the engine once it has passed.
#pragma once

#include <algorithm>
#include <chrono>

namespace tq::server {

class RequestDeadline {
 public:
  using Clock = std::chrono::steady_clock;

  // `timeout_s` <= 0: no server limit. `start`: when the request arrived.
  explicit RequestDeadline(double timeout_s, Clock::time_point start = Clock::now()) {
    if (timeout_s > 0) {
      at_ = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
      set_ = true;
    }
  }

  // Takes a client's deadline (gRPC: ServerContext::deadline(), system clock) if it is earlier. A deadline
  // years away means "none" (gRPC reports gpr_inf_future that way).
  void Tighten(std::chrono::system_clock::time_point client_deadline) {
    const auto left = client_deadline - std::chrono::system_clock::now();
    if (left > std::chrono::hours(24 * 365)) return;
    const Clock::time_point at = Clock::now() + std::chrono::duration_cast<Clock::duration>(left);
    if (!set_ || at < at_) {
      at_ = at;
      set_ = true;
      by_client_ = true;
    }
  }

  bool Expired() const { return set_ && Clock::now() >= at_; }
  // True when the client's deadline (not the server's limit) is the one in force.
  bool by_client() const { return by_client_; }

  // How long to wait for the next event: `cap`, or less when the deadline comes sooner (never negative).
  std::chrono::milliseconds WaitAtMost(std::chrono::milliseconds cap) const {
    if (!set_) return cap;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(at_ - Clock::now());
    return std::clamp(left, std::chrono::milliseconds(0), cap);
  }

 private:
  Clock::time_point at_{};
  bool set_ = false;
  bool by_client_ = false;
};

}  // namespace tq::server
