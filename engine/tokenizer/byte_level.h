// GPT-2's byte-to-unicode alphabet: byte-level BPE vocabularies spell every byte as one printable code point.
// Bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves; the other 68 bytes (controls, space,
// 0x7F..0xA0, 0xAD) map, in increasing order, to U+0100, U+0101, ... (so ' ' is U+0120 'Ġ' and '\n' is U+010A
// 'Ċ').
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tq::engine {

// The code point that spells `byte`.
uint32_t ByteToUnicode(uint8_t byte);

// The byte a code point spells, or -1 if it spells none.
int UnicodeToByte(uint32_t cp);

// Each byte of `bytes` as its code point, UTF-8 encoded.
std::string BytesToByteLevel(std::string_view bytes);

// The inverse; code points outside the alphabet are kept as their UTF-8 bytes.
std::string ByteLevelToBytes(std::string_view text);

}  // namespace tq::engine
