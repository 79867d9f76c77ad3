// Who is using the engine, so that shutdown destroys it only after its last user left.
//
// Every handler that touches the engine (an HTTP route past the probes, every gRPC method) holds a Use for as long
// as it does. At shutdown, after the front ends stopped taking requests, the daemon calls Close: it refuses new
// Uses and waits until none is held. gRPC's own wait for its handlers (Server::Shutdown) happens in the system
// library, which the thread sanitizer cannot see into, and neither front end's wait is unbounded; the gate makes
// the hand-over explicit and gives the daemon a bound it can act on (exit without destroying anything).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace tq::server {

class EngineGate {
 public:
  // A held Use (true) keeps Close waiting; an empty one (false) means the gate is closed: answer "unavailable".
  class [[nodiscard]] Use {
   public:
    Use() = default;
    Use(Use&& other) noexcept : gate_(other.gate_) { other.gate_ = nullptr; }
    Use& operator=(Use&&) = delete;
    Use(const Use&) = delete;
    ~Use();
    explicit operator bool() const { return gate_ != nullptr; }

   private:
    friend class EngineGate;
    explicit Use(EngineGate* gate) : gate_(gate) {}
    EngineGate* gate_ = nullptr;
  };

  Use Enter();
  // Refuses new Uses, then waits up to `timeout` for the held ones to end. True when none is held (the engine can
  // be destroyed), false when some still are after the timeout.
  bool Close(std::chrono::milliseconds timeout);
  int held() const;

 private:
  void Leave();

  mutable std::mutex mu_;
  std::condition_variable idle_;
  int held_ = 0;
  bool closed_ = false;
};

}  // namespace tq::server
