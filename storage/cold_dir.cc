#include "storage/cold_dir.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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

}  // namespace tq::storage
