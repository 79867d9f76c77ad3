// The cold directory is private to the daemon's user (storage/cold_dir.h), and a ColdStore opened on a bad one
// refuses with the reason; cold files are 0600.
#include "storage/cold_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "storage/cold_store.h"
#include "storage/page_format.h"
#include "storage_test_util.h"

namespace tq::storage {
namespace {

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777;
}

// A small pread store of 16 KiB slots in `dir`.
ColdStoreOptions SmallStore(const std::string& dir) {
  ColdStoreOptions o;
  o.cold_dir = dir;
  o.capacity_bytes = 8ull << 20;
  o.max_page_bytes = 16 * 1024 - kPageHeaderBytes;
  o.file_bytes = 4ull << 20;
  o.io = IoQueueOptions{"pread", 8};
  return o;
}

TEST(ColdDirTest, CreatesAMissingDirectoryWithMode0700) {
  testing::TempDir tmp;
  const std::string dir = tmp.path() + "/a/b/kv";
  ASSERT_TRUE(PrepareColdDir(dir).ok());
  EXPECT_TRUE(std::filesystem::is_directory(dir));
  EXPECT_EQ(ModeOf(dir), 0700);
}

TEST(ColdDirTest, TightensAnOpenDirectoryOfOurs) {
  testing::TempDir tmp;
  const std::string dir = tmp.path() + "/kv";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  ASSERT_TRUE(PrepareColdDir(dir).ok());
  EXPECT_EQ(ModeOf(dir), 0700);
}

TEST(ColdDirTest, RefusesASymbolicLink) {
  testing::TempDir tmp;
  const std::string target = tmp.path() + "/real", link = tmp.path() + "/link";
  ASSERT_EQ(::mkdir(target.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  Status s = PrepareColdDir(link);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("symbolic link"), std::string::npos) << s.ToString();
}

TEST(ColdDirTest, RefusesAFile) {
  testing::TempDir tmp;
  const std::string file = tmp.path() + "/file";
  std::ofstream(file) << "x";
  Status s = PrepareColdDir(file);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("not a directory"), std::string::npos) << s.ToString();
}

TEST(ColdDirTest, RefusesADirectoryOfAnotherUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another user (chown)";
  testing::TempDir tmp;
  const std::string dir = tmp.path() + "/theirs";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  Status s = PrepareColdDir(dir);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_NE(s.message().find("uid 65534"), std::string::npos) << s.ToString();
}

TEST(ColdDirTest, AStoreMakesPrivateFilesAndRefusesALinkedDirectory) {
  testing::TempDir tmp;
  ColdStoreOptions o = SmallStore(tmp.path() + "/cold");
  {
    StatusOr<std::unique_ptr<ColdStore>> store = ColdStore::Open(o);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
  }
  EXPECT_EQ(ModeOf(o.cold_dir), 0700);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(o.cold_dir)) {
    EXPECT_EQ(ModeOf(e.path().string()), 0600) << e.path();
    ++files;
  }
  EXPECT_GT(files, 0);
  const std::string link = tmp.path() + "/link";
  ASSERT_EQ(::symlink(o.cold_dir.c_str(), link.c_str()), 0);
  o.cold_dir = link;
  StatusOr<std::unique_ptr<ColdStore>> refused = ColdStore::Open(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("symbolic link"), std::string::npos) << refused.status().ToString();
}

TEST(ColdDirTest, OneHolderAtATimeAndTheSecondIsToldThePid) {
  testing::TempDir tmp;
  ASSERT_TRUE(PrepareColdDir(tmp.path() + "/kv").ok());
  {
    StatusOr<ColdDirLock> first = ColdDirLock::Lock(tmp.path() + "/kv");
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    EXPECT_TRUE(first->held());
    EXPECT_EQ(ModeOf(tmp.path() + "/kv/LOCK"), 0600);
    // flock locks belong to the open file description: a second open, even in this process, is refused.
    StatusOr<ColdDirLock> second = ColdDirLock::Lock(tmp.path() + "/kv");
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(second.status().message().find("pid " + std::to_string(::getpid())), std::string::npos)
        << second.status().ToString();
  }
  StatusOr<ColdDirLock> again = ColdDirLock::Lock(tmp.path() + "/kv");
  EXPECT_TRUE(again.ok()) << "released when the holder is gone: " << again.status().ToString();
}

TEST(ColdDirTest, TwoStoresCannotShareADirectory) {
  testing::TempDir tmp;
  ColdStoreOptions o = SmallStore(tmp.path() + "/cold");
  StatusOr<std::unique_ptr<ColdStore>> first = ColdStore::Open(o);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  StatusOr<std::unique_ptr<ColdStore>> second = ColdStore::Open(o);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("in use by another process"), std::string::npos)
      << second.status().ToString();
  first->reset();
  EXPECT_TRUE(ColdStore::Open(o).ok()) << "the directory is free once the first store is closed";
}

}  // namespace
}  // namespace tq::storage
