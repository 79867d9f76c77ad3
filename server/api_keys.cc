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

StatusOr<std::unique_ptr<ApiKeys>> ApiKeys::Load(const std::string& inline_keys, const std::string& key_file) {
  std::vector<Digest> inline_digests;
  std::stringstream in(inline_keys);
  std::string key;
  while (std::getline(in, key, ',')) {
    key = Trim(key);
    if (!key.empty()) inline_digests.push_back(DigestOf(key));
  }
  std::unique_ptr<ApiKeys> keys(new ApiKeys(std::move(inline_digests), key_file));
  keys->current_ = std::make_shared<const std::vector<Digest>>(keys->inline_);
  if (!key_file.empty()) TQ_RETURN_IF_ERROR(keys->Reload().status());
  return keys;
}

StatusOr<size_t> ApiKeys::Reload() {
  std::vector<Digest> all = inline_;
  if (!key_file_.empty()) {
    TQ_ASSIGN_OR_RETURN(const std::vector<std::string> file_keys, ReadKeyFile(key_file_));
    for (const std::string& k : file_keys) all.push_back(DigestOf(k));
  }
  const size_t n = all.size();
  std::lock_guard<std::mutex> lock(mu_);
  current_ = std::make_shared<const std::vector<Digest>>(std::move(all));
  return n;
}

std::shared_ptr<const std::vector<ApiKeys::Digest>> ApiKeys::Current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

bool ApiKeys::required() const { return !Current()->empty(); }

bool ApiKeys::Accepts(std::string_view authorization) const {
  const auto keys = Current();
  if (keys->empty()) return true;
  if (!authorization.starts_with(kBearer)) return false;
  const Digest presented = DigestOf(authorization.substr(kBearer.size()));
  // Every key is compared in full; no early exit.
  int matched = 0;
  for (const Digest& d : *keys) matched |= CRYPTO_memcmp(d.data(), presented.data(), d.size()) == 0 ? 1 : 0;
  return matched != 0;
}

}  // namespace tq::server
