// Lifecycle state shared by the front ends: readiness, draining, and who is using the engine.
#pragma once

#include <atomic>

#include "server/engine_gate.h"

namespace tq::server {

struct ServerState {
  std::atomic<bool> ready{false};     // the model is loaded and the front ends listen
  std::atomic<bool> draining{false};  // SIGTERM received: admit nothing new
  std::atomic<int> in_flight{0};      // generation requests being served by the front ends
  EngineGate engine_gate;             // held by every handler that uses the engine; closed before it is destroyed
};

}  // namespace tq::server
