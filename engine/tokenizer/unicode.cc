#include "engine/tokenizer/unicode.h"

#include <algorithm>

namespace tq::engine {

bool unicode_internal::InRanges(std::span<const CodepointRange> ranges, uint32_t cp) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                             [](uint32_t c, const CodepointRange& r) { return c < r.first; });
  return it != ranges.begin() && cp <= std::prev(it)->last;
}

int Utf8SequenceLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

int DecodeUtf8(std::string_view text, size_t pos, uint32_t* cp) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t lead = byte(pos);
  if (lead < 0x80) {
    *cp = lead;
    return 1;
  }
  const int len = Utf8SequenceLength(lead);
  if (len == 1 || pos + static_cast<size_t>(len) > text.size()) {
    *cp = kReplacementChar;
    return 1;
  }
  uint32_t c = lead & (0x7F >> len);
  for (int k = 1; k < len; ++k) {
    const uint8_t b = byte(pos + static_cast<size_t>(k));
    if ((b & 0xC0) != 0x80) {
      *cp = kReplacementChar;
      return 1;
    }
    c = (c << 6) | (b & 0x3F);
  }
  *cp = c;
  return len;
}

std::vector<uint32_t> DecodeUtf8All(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    uint32_t cp = 0;
    pos += static_cast<size_t>(DecodeUtf8(text, pos, &cp));
    out.push_back(cp);
  }
  return out;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace tq::engine
