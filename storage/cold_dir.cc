#include "storage/cold_dir.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <filesystem>
#include <system_error>

namespace tq::storage {

Status PrepareColdDir(const std::string& path) {
  if (path.empty()) return InvalidArgumentError("the cold directory is empty");
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return ErrnoToStatus(errno, "stat " + path);
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    if (ec) return IoError("create " + parent.string() + ": " + ec.message());
    if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoToStatus(errno, "create " + path);
    if (::lstat(path.c_str(), &st) != 0) return ErrnoToStatus(errno, "stat " + path);
  }
  if (S_ISLNK(st.st_mode)) {
    return InvalidArgumentError("cold directory " + path + " is a symbolic link; give the directory itself");
  }
  if (!S_ISDIR(st.st_mode)) return InvalidArgumentError("cold directory " + path + " exists and is not a directory");
  if (st.st_uid != ::geteuid()) {
    return PermissionDeniedError("cold directory " + path + " is owned by uid " + std::to_string(st.st_uid) +
                                 ", not by this daemon's uid " + std::to_string(::geteuid()) +
                                 "; its pages would be readable by that user");
  }
  if ((st.st_mode & 077) != 0) {
    if (::chmod(path.c_str(), 0700) != 0) return ErrnoToStatus(errno, "chmod 0700 " + path);
    spdlog::info("cold tier: {} had mode {:o}; now 0700 (pages hold users' prompts)", path, st.st_mode & 0777);
  }
  return Status::Ok();
}

StatusOr<ColdDirLock> ColdDirLock::Lock(const std::string& dir) {
  const std::string path = dir + "/LOCK";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return ErrnoToStatus(errno, "open " + path);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {};
    const ssize_t n = ::pread(fd, pid, sizeof pid - 1, 0);
    ::close(fd);
    if (err != EWOULDBLOCK) return ErrnoToStatus(err, "lock " + path);
    std::string holder = n > 0 ? std::string(pid, static_cast<size_t>(n)) : std::string("unknown");
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    return UnavailableError("cold directory " + dir + " is in use by another process (pid " + holder +
                                   "; " + path + "); give each daemon its own directory");
  }
  const std::string me = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    const int err = errno;
    ::close(fd);
    return ErrnoToStatus(err, "write " + path);
  }
  return ColdDirLock(fd);
}

ColdDirLock& ColdDirLock::operator=(ColdDirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

ColdDirLock::~ColdDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the flock
}

}  // namespace tq::storage
