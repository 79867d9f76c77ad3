// A real full file system: a small tmpfs mounted by the test. At open the store caps its budget to the room there
// is (or refuses a full one); a disk that another writer fills later gives ENOSPC, which stops admission.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "storage/cold_store.h"
#include "storage/page_format.h"
#include "storage_test_util.h"

namespace tq::storage {
namespace {

using testing::PageBytes;

struct FullCase {
  std::string backend;
  uint32_t grow_slots;  // > 0: ENOSPC comes from fallocate; 0: from the write itself
};

class DiskFullTest : public ::testing::TestWithParam<FullCase> {
 protected:
  void SetUp() override {
    TQ_SKIP_IF_NO_BACKEND(GetParam().backend);
    if (::mount("tqtest", dir_.path().c_str(), "tmpfs", 0, "size=8m") != 0) {
      GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno)
                   << "; needs CAP_SYS_ADMIN); skipping the real full-disk test";
    }
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) ::umount2(dir_.path().c_str(), MNT_DETACH);
  }
  testing::TempDir dir_;
  bool mounted_ = false;
};

TEST_P(DiskFullTest, FillsUntilEnospcThenStopsAdmittingAndStaysReadable) {
  ColdStoreOptions o;
  o.cold_dir = dir_.path() + "/cold";
  o.capacity_bytes = 64ull << 20;  // budget far above the 8 MiB file system
  o.max_page_bytes = 64 * 1024 - kPageHeaderBytes;
  o.grow_slots = GetParam().grow_slots;
  o.io = IoQueueOptions{GetParam().backend, 8};
  StatusOr<std::unique_ptr<ColdStore>> opened = ColdStore::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  ColdStore& store = **opened;
  EXPECT_LE(store.slot_count() * store.slot_bytes(), 8ull << 20);  // the budget was capped to the file system
  {
    // Another writer takes 6 MiB of the 8 after the store opened: the disk fills before the budget does.
    std::ofstream filler(dir_.path() + "/filler", std::ios::binary);
    const std::vector<char> zeros(6 << 20, 0);
    filler.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
    ASSERT_TRUE(filler.good());
  }

  constexpr size_t kLen = 60000;
  uint64_t stored = 0;
  Status last;
  for (uint64_t id = 0; id < 1024; ++id) {
    last = store.Put(id, PageBytes(id, kLen));
    if (!last.ok()) break;
    ++stored;
  }
  EXPECT_EQ(last.code(), StatusCode::kResourceExhausted) << last.ToString();
  EXPECT_GT(stored, 10u);  // most of the 2 MiB left: up to 32 whole slots, or 34 pages of 60 KiB grown by writes
  EXPECT_LE(stored, 34u);
  EXPECT_FALSE(store.admitting());
  EXPECT_EQ(store.stats().errors(TierError::kNoSpace), 1u);
  EXPECT_EQ(store.Put(5000, PageBytes(5000, 10)).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(store.pages(), stored);

  std::vector<std::byte> got(64 * 1024);
  for (uint64_t id = 0; id < stored; ++id) {
    StatusOr<uint32_t> n = store.Read(id, got);
    ASSERT_TRUE(n.ok()) << id << ": " << n.status().ToString();
    ASSERT_EQ(*n, kLen);
    ASSERT_EQ(std::memcmp(got.data(), PageBytes(id, kLen).data(), kLen), 0) << id;
  }
  // The other writer frees its space: admission resumes and pages are written again.
  for (uint64_t id = 0; id < 4; ++id) ASSERT_TRUE(store.Erase(id).ok());
  ASSERT_EQ(std::remove((dir_.path() + "/filler").c_str()), 0);
  store.ResumeAdmission();
  const Status again = store.Put(7000, PageBytes(7000, kLen));
  EXPECT_TRUE(again.ok()) << again.ToString();
}

TEST_P(DiskFullTest, AFullFileSystemIsRefusedAtOpen) {
  {
    std::ofstream filler(dir_.path() + "/filler", std::ios::binary);
    const std::vector<char> zeros(1 << 20, 0);
    while (filler.write(zeros.data(), static_cast<std::streamsize>(zeros.size()))) {
    }
  }
  ColdStoreOptions o;
  o.cold_dir = dir_.path() + "/cold";
  o.max_page_bytes = 64 * 1024 - kPageHeaderBytes;
  o.io = IoQueueOptions{GetParam().backend, 8};
  StatusOr<std::unique_ptr<ColdStore>> opened = ColdStore::Open(o);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kResourceExhausted) << opened.status().ToString();
  EXPECT_NE(opened.status().message().find("is full"), std::string::npos) << opened.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(Backends, DiskFullTest,
                         ::testing::Values(FullCase{"io_uring", 16}, FullCase{"io_uring", 0},
                                           FullCase{"pread", 16}, FullCase{"pread", 0}),
                         [](const ::testing::TestParamInfo<FullCase>& p) {
                           return std::string(p.param.backend == "io_uring" ? "IoUring" : "Pread") +
                                  (p.param.grow_slots > 0 ? "Fallocate" : "Write");
                         });

}  // namespace
}  // namespace tq::storage
