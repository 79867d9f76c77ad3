#include "common/utf8.h"

#include <algorithm>

namespace tq {
namespace {

// Expected length of a sequence from its lead byte; 0 for a continuation or invalid lead byte.
int SequenceLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 0;
}

}  // namespace

size_t CompleteUtf8Prefix(std::string_view bytes) {
  // Look back at most 3 bytes for the lead byte of a final incomplete sequence.
  const size_t n = bytes.size();
  for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
    const unsigned char c = static_cast<unsigned char>(bytes[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const int len = SequenceLength(c);
    if (len > static_cast<int>(back)) return n - back;  // lead byte whose sequence is not complete yet
    return n;
  }
  return n;
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int len = SequenceLength(c);
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? c : (c & (0xFF >> (len + 1)));
    for (int k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

std::string SanitizeUtf8(std::string_view text) {
  if (IsValidUtf8(text)) return std::string(text);
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    size_t len = 1;
    for (size_t l = 1; l <= 4 && i + l <= text.size(); ++l) {
      if (IsValidUtf8(text.substr(i, l))) {
        len = l;
        out.append(text.substr(i, l));
        break;
      }
      if (l == 4 || i + l == text.size()) {
        len = 1;
        out += "\xEF\xBF\xBD";
        break;
      }
    }
    i += len;
  }
  return out;
}

}  // namespace tq
