#include "storage/crc32c.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string_view>
#include <vector>

namespace tq::storage {
namespace {

std::span<const std::byte> Bytes(std::string_view s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

TEST(Crc32c, KnownValues) {
  EXPECT_EQ(Crc32c(Bytes("123456789")), 0xE3069283u);
  EXPECT_EQ(Crc32cPortable(Bytes("123456789")), 0xE3069283u);
  std::vector<std::byte> zeros(32, std::byte{0});
  EXPECT_EQ(Crc32c(zeros), 0x8A9136AAu);  // RFC 3720 B.4
  std::vector<std::byte> ones(32, std::byte{0xFF});
  EXPECT_EQ(Crc32c(ones), 0x62A8AB43u);
  EXPECT_EQ(Crc32c({}), 0u);
}

TEST(Crc32c, FastMatchesPortableAndStreams) {
  std::mt19937 rng(7);
  std::vector<std::byte> data(70000);
  for (auto& b : data) b = static_cast<std::byte>(rng());
  for (size_t n : {0u, 1u, 7u, 8u, 9u, 63u, 3071u, 3072u, 3080u, 4096u, 6144u, 10000u, 65537u}) {
    std::span<const std::byte> s(data.data() + 3, n);  // unaligned start
    ASSERT_EQ(Crc32c(s), Crc32cPortable(s)) << n;
    size_t cut = n / 3;
    EXPECT_EQ(Crc32c(s.subspan(cut), Crc32c(s.first(cut))), Crc32c(s)) << n;
  }
}

}  // namespace
}  // namespace tq::storage
