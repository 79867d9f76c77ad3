// What the page store and page tier tests share: page sizes of the three classes and seeded page bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "engine/kv/page_store.h"
#include "gtest/gtest.h"

namespace tq::engine::testing {

// Bytes of one page (K + V) of each class for head_dim 128: f16 with scales, 8-bit, 4-bit.
inline constexpr uint32_t kHotPage = 32768 + 128, kActivePage = 16384 + 128, kSparsePage = 9216 + 64;

// n bytes drawn from `seed`: the same seed gives the same page.
inline std::vector<uint8_t> Bytes(uint64_t seed, size_t n) {
  std::vector<uint8_t> out(n);
  std::mt19937_64 rng(seed);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

// The first n bytes of page `id`, pinned out of the store (empty, with a test failure, when it cannot be pinned).
inline std::vector<uint8_t> ReadPage(const KvPageStore& s, PageId id, size_t n) {
  auto pin = s.Pin(id);
  EXPECT_TRUE(pin.ok()) << pin.status().ToString();
  if (!pin.ok()) return {};
  return std::vector<uint8_t>(pin->data, pin->data + n);
}

}  // namespace tq::engine::testing
