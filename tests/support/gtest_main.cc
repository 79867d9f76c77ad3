// The main of every GoogleTest binary (tq_test). It runs all tests and exits with
//   the failure code of RUN_ALL_TESTS when any test failed (failures always win over skips),
//   kSkipExitCode when none failed and at least one called GTEST_SKIP, so that ctest (SKIP_RETURN_CODE) shows the
//   binary as "Skipped" and scripts/test-skips.py lists each skipped test with its reason,
//   0 otherwise.
#include <gtest/gtest.h>

namespace {
// Must match TQ_SKIP_EXIT_CODE in cmake/tq_helpers.cmake and skip_test in tests/integration/lib.sh.
constexpr int kSkipExitCode = 77;
}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  if (rc != 0) return rc;
  return ::testing::UnitTest::GetInstance()->skipped_test_count() > 0 ? kSkipExitCode : 0;
}
