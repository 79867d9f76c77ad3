// Lifecycle flags shared by the front ends: readiness and draining.
#pragma once

#include <atomic>

namespace tq::server {

struct ServerState {
  std::atomic<bool> ready{false};     // the model is loaded and the front ends listen
  std::atomic<bool> draining{false};  // SIGTERM received: admit nothing new
  std::atomic<int> in_flight{0};      // generation requests being served by the front ends
};

}  // namespace tq::server
