// Facts about this build, filled in by CMake (cmake/tq_version.cmake).
#pragma once

#include <string_view>

namespace tq {

struct BuildInfo {
  std::string_view version;     // project version, e.g. "0.1.0"
  std::string_view commit;      // short git commit, "-dirty" when the tree had changes, or "unknown"
  std::string_view build_type;  // CMAKE_BUILD_TYPE, plus the sanitizer if any
  std::string_view compiler;    // "GNU 12.2.0"
};

const BuildInfo& GetBuildInfo();

}  // namespace tq
