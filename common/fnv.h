// 64-bit FNV-1a over the little-endian bytes of 64-bit words: the hash behind KV layout fingerprints and prefix
// chain hashes (stable across versions: both are stored in cold-tier page records).
#pragma once

#include <cstdint>

namespace tq {

class Fnv1a64 {
 public:
  Fnv1a64() = default;
  explicit Fnv1a64(uint64_t basis) : h_(basis) {}
  static constexpr uint64_t kBasis = 0xcbf29ce484222325ull;

  // Mixes the 8 bytes of v, least significant first.
  Fnv1a64& Mix(uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h_ ^= (v >> (8 * i)) & 0xff;
      h_ *= 0x100000001b3ull;
    }
    return *this;
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = kBasis;
};

}  // namespace tq
