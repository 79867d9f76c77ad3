// A read-only memory map of a whole file. Move-only; unmaps on destruction. The mapped bytes never move, so
// views into them stay valid while the MappedFile (wherever it was moved) lives.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "common/status.h"

namespace tq::engine {

class MappedFile {
 public:
  // Maps `path` read-only. An empty file maps to an empty span.
  static StatusOr<MappedFile> Open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  void Reset();

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace tq::engine
