#include "server/engine_gate.h"

namespace tq::server {

EngineGate::Use::~Use() {
  if (gate_ != nullptr) gate_->Leave();
}

EngineGate::Use EngineGate::Enter() {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return Use();
  ++held_;
  return Use(this);
}

void EngineGate::Leave() {
  std::lock_guard<std::mutex> lock(mu_);
  if (--held_ == 0) idle_.notify_all();
}

bool EngineGate::Close(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  closed_ = true;
  return idle_.wait_for(lock, timeout, [&] { return held_ == 0; });
}

int EngineGate::held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_;
}

}  // namespace tq::server
