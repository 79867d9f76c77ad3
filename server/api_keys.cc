#include "server/api_keys.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <sstream>

namespace tq::server {
namespace {

constexpr std::string_view kBearer = "Bearer ";

std::string Trim(std::string s) {
  s.erase(0, s.find_first_not_of(" \t\r"));
  s.erase(s.find_last_not_of(" \t\r") + 1);
  return s;
}

std::array<unsigned char, 32> DigestOf(std::string_view key) {
  std::array<unsigned char, 32> d{};
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), d.data());
  return d;
}

// A key's tenant name: 8 bytes of a SHA-256 over a fixed prefix and the key, in hex (a different digest from the
// one compared, so it says nothing about that one).
std::string TenantOf(std::string_view key) {
  std::string input = "tqserve-tenant:";
  input += key;
  unsigned char d[32];
  SHA256(reinterpret_cast<const unsigned char*>(input.data()), input.size(), d);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 8; ++i) {
    out += kHex[d[i] >> 4];
    out += kHex[d[i] & 15];
  }
  return out;
}

StatusOr<std::vector<std::string>> ReadKeyFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot read the API key file " + path + " (server.api_key_file)");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    spdlog::warn("the API key file {} is readable by other users (mode {:o}); chmod 600 it", path,
                 st.st_mode & 0777);
  }
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(in, line)) {
    line = Trim(line);
    if (line.empty() || line.front() == '#') continue;
    keys.push_back(line);
  }
  if (keys.empty()) return InvalidArgumentError("the API key file " + path + " holds no key");
  return keys;
}

}  // namespace

StatusOr<std::unique_ptr<ApiKeys>> ApiKeys::Load(const std::string& inline_keys, const std::string& key_file,
                                                  const std::string& admin_keys) {
  std::vector<Key> keys;
  for (const auto& [list, admin] : {std::pair{&inline_keys, false}, std::pair{&admin_keys, true}}) {
    std::stringstream in(*list);
    std::string key;
    while (std::getline(in, key, ',')) {
      key = Trim(key);
      if (!key.empty()) keys.push_back({DigestOf(key), admin, TenantOf(key)});
    }
  }
  std::unique_ptr<ApiKeys> out(new ApiKeys(std::move(keys), key_file));
  out->current_ = std::make_shared<const std::vector<Key>>(out->inline_);
  if (!key_file.empty()) TQ_RETURN_IF_ERROR(out->Reload().status());
  return out;
}

StatusOr<size_t> ApiKeys::Reload() {
  std::vector<Key> all = inline_;
  if (!key_file_.empty()) {
    TQ_ASSIGN_OR_RETURN(const std::vector<std::string> file_keys, ReadKeyFile(key_file_));
    for (const std::string& line : file_keys) {
      const bool admin = line.rfind("admin ", 0) == 0;
      const std::string key = admin ? Trim(line.substr(6)) : line;
      all.push_back({DigestOf(key), admin, TenantOf(key)});
    }
  }
  const size_t n = all.size();
  std::lock_guard<std::mutex> lock(mu_);
  current_ = std::make_shared<const std::vector<Key>>(std::move(all));
  return n;
}

std::shared_ptr<const std::vector<ApiKeys::Key>> ApiKeys::Current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

bool ApiKeys::required() const { return !Current()->empty(); }

Caller ApiKeys::Identify(std::string_view authorization) const {
  const auto keys = Current();
  if (keys->empty()) return {true, true, ""};
  if (!authorization.starts_with(kBearer)) return {};
  const Digest presented = DigestOf(authorization.substr(kBearer.size()));
  // Every key is compared in full; no early exit.
  const Key* match = nullptr;
  for (const Key& k : *keys) {
    if (CRYPTO_memcmp(k.digest.data(), presented.data(), presented.size()) == 0) match = &k;
  }
  if (match == nullptr) return {};
  return {true, match->admin, match->tenant};
}

}  // namespace tq::server
