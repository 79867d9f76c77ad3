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

}  // namespace tq::storage
