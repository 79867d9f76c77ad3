// Pre-tokenizers of byte-level BPE models: split text into words before BPE merges, as the regular
// expressions of the model's original tokenizer do. Written by hand (no regex engine), one function per rule
// set.
//   gpt2    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   smollm  \p{N} (each digit a word), then gpt2 within each piece
//   llama3  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//           \s*[\r\n]+|\s+(?!\S)|\s+
//   qwen2   llama3 with \p{N} (single digits) instead of \p{N}{1,3}
// Text is decoded to code points first (invalid UTF-8 bytes become U+FFFD, as in llama.cpp).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tq::engine {

enum class PreTokenizer { kGpt2, kSmolLm, kLlama3, kQwen2 };

// The pre-tokenizer named by tokenizer.ggml.pre ("gpt-2", "smollm", "llama-bpe", "qwen2", ...), or nullopt.
std::optional<PreTokenizer> PreTokenizerFromName(std::string_view name);

// The names PreTokenizerFromName accepts, for error messages.
std::string SupportedPreTokenizerNames();

// Splits `text` into words (UTF-8, concatenating to the text with invalid bytes replaced by U+FFFD).
std::vector<std::string> PreTokenize(PreTokenizer pre, std::string_view text);

}  // namespace tq::engine
