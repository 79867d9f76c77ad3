// The few Unicode facts the tokenizers need: UTF-8 decoding and encoding, and membership in the general
// categories L (letter), N (number), P (punctuation) and the White_Space property (unicode_tables.cc,
// generated from ICU; Unicode 15.0).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tq::engine {

struct CodepointRange {
  uint32_t first;
  uint32_t last;  // inclusive
};

namespace unicode_internal {
extern const std::span<const CodepointRange> kLetters;
extern const std::span<const CodepointRange> kNumbers;
extern const std::span<const CodepointRange> kPunctuation;
extern const std::span<const CodepointRange> kWhitespace;
bool InRanges(std::span<const CodepointRange> ranges, uint32_t cp);
}  // namespace unicode_internal

inline constexpr uint32_t kReplacementChar = 0xFFFD;

inline bool IsLetter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return unicode_internal::InRanges(unicode_internal::kLetters, cp);
}
inline bool IsNumber(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return unicode_internal::InRanges(unicode_internal::kNumbers, cp);
}
inline bool IsWhitespace(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return unicode_internal::InRanges(unicode_internal::kWhitespace, cp);
}
inline bool IsPunctuation(uint32_t cp) {
  return unicode_internal::InRanges(unicode_internal::kPunctuation, cp);
}

// Length in bytes of the UTF-8 sequence that starts with byte `lead` (1 for a stray or invalid byte).
int Utf8SequenceLength(uint8_t lead);

// Decodes the code point at text[pos]; returns its length in bytes. An invalid or truncated sequence decodes
// as U+FFFD with length 1 (as llama.cpp does, so ids match on invalid input).
int DecodeUtf8(std::string_view text, size_t pos, uint32_t* cp);

// All code points of `text` (invalid bytes become U+FFFD).
std::vector<uint32_t> DecodeUtf8All(std::string_view text);

// Appends the UTF-8 encoding of cp (cp <= 0x10FFFF).
void AppendUtf8(uint32_t cp, std::string* out);

}  // namespace tq::engine
