// UTF-8 checks shared by the engine (streamed text) and the front ends (request and response text).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tq {

// True when `text` is valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool IsValidUtf8(std::string_view text);

// Length of the longest prefix of `bytes` that ends on a UTF-8 code point boundary (a trailing incomplete
// sequence is excluded; invalid bytes count as complete so they never block the stream).
size_t CompleteUtf8Prefix(std::string_view bytes);

// `text` with every byte that is not part of a valid sequence replaced by U+FFFD: safe to put in JSON.
std::string SanitizeUtf8(std::string_view text);

}  // namespace tq
