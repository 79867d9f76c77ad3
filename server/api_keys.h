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

// Who sent a request. Tenants keep apart: each key is its own tenant for the prefix cache, stored responses, Abort
// and KV events; an admin key sees and may act on everything.
struct Caller {
  bool accepted = false;
  bool admin = false;  // an admin key, or no keys configured (one tenant, the operator's)
  std::string tenant;  // 16 hex digits naming the key (a hash; not the key); "" when no keys are configured
};

class ApiKeys {
 public:
  // `inline_keys` and `admin_keys`: comma-separated; `key_file`: "" or a file of one key per line (blank lines and
  // lines starting with # ignored; "admin KEY" marks an admin key). Errors: the file cannot be read, or holds no
  // key.
  static StatusOr<std::unique_ptr<ApiKeys>> Load(const std::string& inline_keys, const std::string& key_file,
                                                 const std::string& admin_keys = "");

  // Reads the key file again; on error the current keys stay and the error is returned. Returns the key count.
  StatusOr<size_t> Reload();

  // False: every request is accepted (no keys configured).
  bool required() const;
  // Whether `authorization` (the HTTP Authorization header or gRPC authorization metadata) is "Bearer KEY" for a
  // configured KEY.
  bool Accepts(std::string_view authorization) const { return Identify(authorization).accepted; }
  // The caller `authorization` names (every key compared in full, as in Accepts).
  Caller Identify(std::string_view authorization) const;

 private:
  using Digest = std::array<unsigned char, 32>;
  struct Key {
    Digest digest;
    bool admin = false;
    std::string tenant;
  };
  ApiKeys(std::vector<Key> inline_keys, std::string key_file)
      : inline_(std::move(inline_keys)), key_file_(std::move(key_file)) {}
  std::shared_ptr<const std::vector<Key>> Current() const;

  const std::vector<Key> inline_;
  const std::string key_file_;
  mutable std::mutex mu_;  // guards current_
  std::shared_ptr<const std::vector<Key>> current_;  // inline_ plus the file's
};

}  // namespace tq::server
