// The cold tier's directory: pages hold users' prompts, so it is private to the daemon's user.
#pragma once

#include <string>

#include "common/status.h"

namespace tq::storage {

// Makes `path` ready for cold files, or says why it cannot be used:
// - absent: created with mode 0700 (missing parents with the default mode);
// - a symbolic link, or not a directory: InvalidArgument naming what it is;
// - a directory owned by another user: PermissionDenied naming both uids;
// - a directory of ours with group or other permission bits: tightened to 0700 (logged).
// Cold files are then created 0600 with O_NOFOLLOW (OpenIoFile).
Status PrepareColdDir(const std::string& path);

// An exclusive lock on a cold directory (flock on <dir>/LOCK, which holds the holder's pid), held while the object
// lives: two daemons writing one directory would overwrite each other's pages. Lock() fails with
// Unavailable naming the holder's pid when another process holds it.
class ColdDirLock {
 public:
  static StatusOr<ColdDirLock> Lock(const std::string& dir);
  ColdDirLock() = default;
  ColdDirLock(ColdDirLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  ColdDirLock& operator=(ColdDirLock&& other) noexcept;
  ColdDirLock(const ColdDirLock&) = delete;
  ColdDirLock& operator=(const ColdDirLock&) = delete;
  ~ColdDirLock();
  bool held() const { return fd_ >= 0; }

 private:
  explicit ColdDirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace tq::storage
