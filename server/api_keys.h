// The API keys a request must present, one set for both front ends: server.api_keys and the lines of
// server.api_key_file (re-read on SIGHUP). A presented key is compared against every configured key by SHA-256
// digest with a constant-time compare, so neither the time taken nor an early exit tells how much of a key
// matched or which key it was.
//
// Threading: Accepts() from any thread; Reload() from the daemon's signal thread (the new set replaces the old
// one atomically; requests in flight keep the set they started with).
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tq::server {

class ApiKeys {
 public:
  // `inline_keys`: comma-separated; `key_file`: "" or a file of one key per line (blank lines and lines starting
  // with # ignored). Errors: the file cannot be read, or holds no key.
  static StatusOr<std::unique_ptr<ApiKeys>> Load(const std::string& inline_keys, const std::string& key_file);

  // Reads the key file again; on error the current keys stay and the error is returned. Returns the key count.
  StatusOr<size_t> Reload();

  // False: every request is accepted (no keys configured).
  bool required() const;
  // Whether `authorization` (the HTTP Authorization header or gRPC authorization metadata) is "Bearer KEY" for a
  // configured KEY.
  bool Accepts(std::string_view authorization) const;

 private:
  using Digest = std::array<unsigned char, 32>;
  ApiKeys(std::vector<Digest> inline_digests, std::string key_file)
      : inline_(std::move(inline_digests)), key_file_(std::move(key_file)) {}
  std::shared_ptr<const std::vector<Digest>> Current() const;

  const std::vector<Digest> inline_;
  const std::string key_file_;
  mutable std::mutex mu_;  // guards current_
  std::shared_ptr<const std::vector<Digest>> current_;  // inline_ plus the file's
};

}  // namespace tq::server
