// Hands GenerateEvents from the engine thread to the thread that serves the request. The engine side never
// blocks (Push only appends); the front-end side waits with a timeout so it can notice a client that left.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>

#include "engine/api.h"

namespace tq::server {

// One channel serves all the choices (n) of a request; each event carries its choice index.
class EventChannel {
 public:
  struct Item {
    int choice = 0;
    engine::GenerateEvent event;
  };

  void Push(int choice, engine::GenerateEvent&& event) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      items_.push_back({choice, std::move(event)});
    }
    cv_.notify_one();
  }

  // The next event, or nullopt after `timeout` without one.
  std::optional<Item> Pop(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !items_.empty(); })) return std::nullopt;
    Item item = std::move(items_.front());
    items_.pop_front();
    return item;
  }

  // A sink for Engine::Submit that keeps the channel alive as long as the engine holds it.
  static engine::EventSink SinkFor(const std::shared_ptr<EventChannel>& channel, int choice) {
    return [channel, choice](engine::GenerateEvent&& event) { channel->Push(choice, std::move(event)); };
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> items_;
};

}  // namespace tq::server
