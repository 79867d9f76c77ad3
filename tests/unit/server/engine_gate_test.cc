// EngineGate (server/engine_gate.h): Close waits for every held Use, refuses new ones, and reports a timeout.
#include "server/engine_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace tq::server {
namespace {

using std::chrono::milliseconds;

TEST(EngineGateTest, CloseWithNoUserReturnsAtOnceAndRefusesNewUses) {
  EngineGate gate;
  {
    const EngineGate::Use use = gate.Enter();
    EXPECT_TRUE(use);
    EXPECT_EQ(gate.held(), 1);
  }
  EXPECT_EQ(gate.held(), 0);
  EXPECT_TRUE(gate.Close(milliseconds(0)));
  const EngineGate::Use late = gate.Enter();
  EXPECT_FALSE(late);
  EXPECT_EQ(gate.held(), 0);
}

TEST(EngineGateTest, CloseWaitsForTheLastUseToEnd) {
  EngineGate gate;
  std::atomic<bool> left{false};
  std::atomic<bool> entered{false};
  std::thread user([&] {
    const EngineGate::Use use = gate.Enter();
    entered = true;
    std::this_thread::sleep_for(milliseconds(200));
    left = true;  // written before the Use ends: Close must see it
  });
  while (!entered) std::this_thread::yield();
  EXPECT_TRUE(gate.Close(milliseconds(10000)));
  EXPECT_TRUE(left);
  EXPECT_FALSE(gate.Enter());
  user.join();
}

TEST(EngineGateTest, CloseTimesOutWhileAUseIsHeld) {
  EngineGate gate;
  EngineGate::Use use = gate.Enter();
  ASSERT_TRUE(use);
  EXPECT_FALSE(gate.Close(milliseconds(50)));
  EXPECT_EQ(gate.held(), 1);
  EXPECT_FALSE(gate.Enter());  // closed even though the wait timed out
  {
    const EngineGate::Use moved = std::move(use);
    EXPECT_TRUE(moved);
    EXPECT_FALSE(use);  // NOLINT(bugprone-use-after-move): a moved-from Use is empty
  }
  EXPECT_EQ(gate.held(), 0);
}

}  // namespace
}  // namespace tq::server
