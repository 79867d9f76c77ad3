// "auto" under a seccomp filter that denies io_uring_setup, as default container profiles do: a child process
// installs the filter, so the rest of the test binary keeps io_uring.
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

#include "storage/cold_store.h"
#include "storage/io_queue.h"
#include "storage_test_util.h"

namespace tq::storage {
namespace {

// Returns EPERM from io_uring_setup and allows every other call.
bool DenyIoUringSetup() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

// Exit codes of the child: 0 all good, 2 no seccomp here, 10+ which check failed.
int Child(const std::string& dir) {
  if (!DenyIoUringSetup()) return 2;
  StatusOr<std::unique_ptr<IoQueue>> uring = MakeIoQueue(IoQueueOptions{"io_uring", 8});
  if (uring.ok() || uring.status().code() != StatusCode::kPermissionDenied) return 10;
  StatusOr<std::unique_ptr<IoQueue>> automatic = MakeIoQueue(IoQueueOptions{"auto", 8});
  if (!automatic.ok() || (*automatic)->name() != "pread") return 11;
  ColdStoreOptions o;
  o.cold_dir = dir + "/cold";
  o.capacity_bytes = 1 << 20;
  o.max_page_bytes = 4000;
  StatusOr<std::unique_ptr<ColdStore>> store = ColdStore::Open(o);  // io.backend defaults to "auto"
  if (!store.ok() || (*store)->backend() != "pread") return 12;
  if (!(*store)->Put(1, testing::PageBytes(1, 4000)).ok()) return 13;
  std::vector<std::byte> got(4000);
  if ((*store)->Read(1, got).value_or(0) != 4000) return 14;
  return 0;
}

TEST(SeccompFallback, AutoPicksPreadWhenIoUringIsDenied) {
  testing::TempDir dir;
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ::_exit(Child(dir.path()));
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 2) GTEST_SKIP() << "seccomp filters cannot be installed here; skipping";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "failed check " << WEXITSTATUS(status) << " (see Child)";
}

}  // namespace
}  // namespace tq::storage
