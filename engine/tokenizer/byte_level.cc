#include "engine/tokenizer/byte_level.h"

#include <array>

#include "engine/tokenizer/unicode.h"

namespace tq::engine {
namespace {

bool SelfMapped(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

constexpr uint32_t kAlphabetEnd = 256 + 68;  // code points past the alphabet

struct Tables {
  std::array<uint32_t, 256> to_unicode{};
  std::array<int16_t, kAlphabetEnd> to_byte{};  // -1 where a code point spells no byte
  Tables() {
    to_byte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = SelfMapped(b) ? static_cast<uint32_t>(b) : next++;
      to_unicode[static_cast<size_t>(b)] = cp;
      to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

}  // namespace

uint32_t ByteToUnicode(uint8_t byte) {
  return GetTables().to_unicode[byte];
}

int UnicodeToByte(uint32_t cp) {
  return cp < kAlphabetEnd ? GetTables().to_byte[cp] : -1;
}

std::string BytesToByteLevel(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) AppendUtf8(ByteToUnicode(static_cast<uint8_t>(c)), &out);
  return out;
}

std::string ByteLevelToBytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    uint32_t cp = 0;
    const int len = DecodeUtf8(text, pos, &cp);
    const int b = UnicodeToByte(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      out.append(text.substr(pos, static_cast<size_t>(len)));
    }
    pos += static_cast<size_t>(len);
  }
  return out;
}

}  // namespace tq::engine
