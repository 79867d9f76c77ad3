#include "storage/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace tq::storage {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // reflected Castagnoli

// kTables[k][b]: CRC of byte b followed by k zero bytes (slicing-by-8).
constexpr std::array<std::array<uint32_t, 256>, 8> MakeTables() {
  std::array<std::array<uint32_t, 256>, 8> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) ? kPolynomial : 0u);
    t[0][b] = c;
  }
  for (int k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  }
  return t;
}

constexpr auto kTables = MakeTables();

// Raw CRC register after `kStripe` zero bytes, as four byte-indexed tables: the register is linear over
// GF(2), so Shift(r) = T0[r & 0xFF] ^ T1[(r >> 8) & 0xFF] ^ T2[(r >> 16) & 0xFF] ^ T3[r >> 24]. This joins
// three streams computed side by side: register(A || B) = Shift(register(A)) ^ register_from_zero(B), for |B|
// = kStripe.
constexpr size_t kStripe = 1024;  // bytes per stream per round; a multiple of 8

std::array<std::array<uint32_t, 256>, 4> MakeShiftTables() {
  std::array<std::array<uint32_t, 256>, 4> t{};
  for (int k = 0; k < 4; ++k) {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t r = b << (8 * k);
      for (size_t i = 0; i < kStripe; ++i) r = (r >> 8) ^ kTables[0][r & 0xFF];
      t[k][b] = r;
    }
  }
  return t;
}

uint32_t ShiftStripe(uint32_t r) {
  static const auto t = MakeShiftTables();
  return t[0][r & 0xFF] ^ t[1][(r >> 8) & 0xFF] ^ t[2][(r >> 16) & 0xFF] ^ t[3][r >> 24];
}

#if defined(__x86_64__)
// The crc32 instruction has a latency of 3 cycles and a throughput of 1: three independent streams keep it
// busy.
__attribute__((target("sse4.2"))) uint32_t Crc32cSse42(const unsigned char* p, size_t n, uint32_t crc) {
  uint64_t a = ~crc;
  for (; n >= 3 * kStripe; n -= 3 * kStripe, p += 3 * kStripe) {
    uint64_t b = 0, c = 0;
    for (size_t i = 0; i < kStripe; i += 8) {
      uint64_t wa, wb, wc;
      std::memcpy(&wa, p + i, 8);
      std::memcpy(&wb, p + kStripe + i, 8);
      std::memcpy(&wc, p + 2 * kStripe + i, 8);
      a = _mm_crc32_u64(a, wa);
      b = _mm_crc32_u64(b, wb);
      c = _mm_crc32_u64(c, wc);
    }
    uint32_t ab = ShiftStripe(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b);
    a = ShiftStripe(ab) ^ static_cast<uint32_t>(c);
  }
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    a = _mm_crc32_u64(a, word);
  }
  auto c32 = static_cast<uint32_t>(a);
  for (; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, *p);
  return ~c32;
}

bool HaveSse42() {
  static const bool have = __builtin_cpu_supports("sse4.2");
  return have;
}
#endif

}  // namespace

uint32_t Crc32cPortable(std::span<const std::byte> data, uint32_t crc) {
  auto* p = reinterpret_cast<const unsigned char*>(data.data());
  size_t n = data.size();
  uint32_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint32_t lo = c ^ (uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24);
    c = kTables[7][lo & 0xFF] ^ kTables[6][(lo >> 8) & 0xFF] ^ kTables[5][(lo >> 16) & 0xFF] ^
        kTables[4][lo >> 24] ^ kTables[3][p[4]] ^ kTables[2][p[5]] ^ kTables[1][p[6]] ^ kTables[0][p[7]];
  }
  for (; n > 0; --n, ++p) c = (c >> 8) ^ kTables[0][(c ^ *p) & 0xFF];
  return ~c;
}

uint32_t Crc32c(std::span<const std::byte> data, uint32_t crc) {
#if defined(__x86_64__)
  if (HaveSse42()) return Crc32cSse42(reinterpret_cast<const unsigned char*>(data.data()), data.size(), crc);
#endif
  return Crc32cPortable(data, crc);
}

}  // namespace tq::storage
