// A GoogleTest binary for tests/integration/test_skips.py, not registered with ctest: its one test passes, skips or
// fails as TQ_SKIP_PROBE says ("pass", "skip", "fail", "skip-and-fail" adds a second, failing test), so the exit
// codes of tests/support/gtest_main.cc and the reasons scripts/test-skips.py reads can be checked on a real binary.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace {

std::string Mode() {
  const char* m = std::getenv("TQ_SKIP_PROBE");
  return m != nullptr ? m : "pass";
}

TEST(SkipProbe, First) {
  if (Mode() == "skip" || Mode() == "skip-and-fail") GTEST_SKIP() << "probe told to skip";
  EXPECT_NE(Mode(), "fail") << "probe told to fail";
}

TEST(SkipProbe, Second) {
  EXPECT_NE(Mode(), "skip-and-fail") << "probe told to fail";
}

}  // namespace
