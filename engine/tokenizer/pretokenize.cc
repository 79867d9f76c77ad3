// Hand-written equivalents of the pre-tokenizer regular expressions in pretokenize.h. Each splitter walks the
// code points of one piece [begin, end) and appends the end offset of every word; nothing looks past `end`
// (a piece boundary behaves as the end of the text, as when regexes are applied one after another).
#include "engine/tokenizer/pretokenize.h"

#include <cstdint>

#include "engine/tokenizer/unicode.h"

namespace tq::engine {
namespace {

constexpr uint32_t kOutOfRange = 0xFFFFFFFF;

class Piece {
 public:
  Piece(const std::vector<uint32_t>& cps, size_t begin, size_t end) : cps_(cps), begin_(begin), end_(end) {}
  size_t begin() const { return begin_; }
  size_t end() const { return end_; }
  uint32_t At(size_t pos) const { return pos < end_ ? cps_[pos] : kOutOfRange; }
  bool Letter(size_t pos) const { return pos < end_ && IsLetter(cps_[pos]); }
  bool Number(size_t pos) const { return pos < end_ && IsNumber(cps_[pos]); }
  bool Space(size_t pos) const { return pos < end_ && IsWhitespace(cps_[pos]); }
  // In range and none of \s, \p{L}, \p{N}.
  bool Other(size_t pos) const { return pos < end_ && !Space(pos) && !Letter(pos) && !Number(pos); }

 private:
  const std::vector<uint32_t>& cps_;
  size_t begin_, end_;
};

uint32_t AsciiLower(uint32_t c) {
  return (c >= 'A' && c <= 'Z') ? c + 32 : c;
}

// 's 't 're 've 'm 'll 'd at pos (case-insensitive when asked): the match length, or 0.
size_t Contraction(const Piece& p, size_t pos, bool ignore_case) {
  if (p.At(pos) != '\'') return 0;
  const auto fold = [&](uint32_t c) { return ignore_case ? AsciiLower(c) : c; };
  const uint32_t a = fold(p.At(pos + 1));
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  const uint32_t b = fold(p.At(pos + 2));
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
void SplitGpt2(const Piece& p, std::vector<size_t>* cuts) {
  for (size_t pos = p.begin(); pos < p.end();) {
    if (const size_t n = Contraction(p, pos, /*ignore_case=*/false)) {
      pos += n;
      cuts->push_back(pos);
      continue;
    }
    // With a leading ' ', the class is decided by the next code point.
    const size_t head = p.At(pos) == ' ' ? pos + 1 : pos;
    if (p.Letter(head) || p.Number(head) || p.Other(head)) {
      const bool letter = p.Letter(head), number = p.Number(head);
      pos = head;
      while (letter ? p.Letter(pos) : number ? p.Number(pos) : p.Other(pos)) ++pos;
      cuts->push_back(pos);
      continue;
    }
    size_t spaces = 0;
    while (p.Space(pos + spaces)) ++spaces;
    if (spaces > 1 && pos + spaces < p.end()) {
      pos += spaces - 1;  // \s+(?!\S): leave the last space to prefix the next word
    } else if (spaces > 0) {
      pos += spaces;  // \s+
    } else {
      ++pos;  // no rule matches (cannot happen with the rules above); keep the code point alone
    }
    cuts->push_back(pos);
  }
}

// Llama 3 and Qwen2 rules (see pretokenize.h); max_digits 3 or 1.
void SplitLlama3(const Piece& p, size_t max_digits, std::vector<size_t>* cuts) {
  for (size_t pos = p.begin(); pos < p.end();) {
    if (const size_t n = Contraction(p, pos, /*ignore_case=*/true)) {
      pos += n;
      cuts->push_back(pos);
      continue;
    }
    const uint32_t c = p.At(pos);
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (c != '\r' && c != '\n' && !p.Number(pos) && (p.Letter(pos) || p.Letter(pos + 1))) {
      ++pos;
      while (p.Letter(pos)) ++pos;
      cuts->push_back(pos);
      continue;
    }
    // \p{N}{1,max_digits}
    if (p.Number(pos)) {
      size_t n = 0;
      while (n < max_digits && p.Number(pos)) ++pos, ++n;
      cuts->push_back(pos);
      continue;
    }
    // ' '?[^\s\p{L}\p{N}]+[\r\n]*
    const size_t head = c == ' ' ? pos + 1 : pos;
    if (p.Other(head)) {
      pos = head;
      while (p.Other(pos)) ++pos;
      while (p.At(pos) == '\r' || p.At(pos) == '\n') ++pos;
      cuts->push_back(pos);
      continue;
    }
    size_t spaces = 0, after_last_newline = 0;
    while (p.Space(pos + spaces)) {
      const uint32_t s = p.At(pos + spaces);
      ++spaces;
      if (s == '\r' || s == '\n') after_last_newline = pos + spaces;
    }
    if (after_last_newline > 0) {
      pos = after_last_newline;  // \s*[\r\n]+
    } else if (spaces > 1 && pos + spaces < p.end()) {
      pos += spaces - 1;  // \s+(?!\S)
    } else if (spaces > 0) {
      pos += spaces;  // \s+
    } else {
      ++pos;
    }
    cuts->push_back(pos);
  }
}

// \p{N}: every number code point is a piece of its own, and so is each run between them.
std::vector<Piece> SplitDigits(const std::vector<uint32_t>& cps) {
  std::vector<Piece> pieces;
  size_t start = 0;
  for (size_t k = 0; k < cps.size(); ++k) {
    if (!IsNumber(cps[k])) continue;
    if (k > start) pieces.emplace_back(cps, start, k);
    pieces.emplace_back(cps, k, k + 1);
    start = k + 1;
  }
  if (start < cps.size()) pieces.emplace_back(cps, start, cps.size());
  return pieces;
}

}  // namespace

std::optional<PreTokenizer> PreTokenizerFromName(std::string_view name) {
  if (name == "gpt-2") return PreTokenizer::kGpt2;
  if (name == "smollm" || name == "starcoder") return PreTokenizer::kSmolLm;
  if (name == "llama-bpe") return PreTokenizer::kLlama3;
  if (name == "qwen2") return PreTokenizer::kQwen2;
  return std::nullopt;
}

std::string SupportedPreTokenizerNames() {
  return "gpt-2, smollm, starcoder, llama-bpe, qwen2";
}

std::vector<std::string> PreTokenize(PreTokenizer pre, std::string_view text) {
  const std::vector<uint32_t> cps = DecodeUtf8All(text);
  std::vector<size_t> cuts;
  switch (pre) {
    case PreTokenizer::kGpt2: SplitGpt2(Piece(cps, 0, cps.size()), &cuts); break;
    case PreTokenizer::kSmolLm:
      for (const Piece& piece : SplitDigits(cps)) SplitGpt2(piece, &cuts);
      break;
    case PreTokenizer::kLlama3: SplitLlama3(Piece(cps, 0, cps.size()), 3, &cuts); break;
    case PreTokenizer::kQwen2: SplitLlama3(Piece(cps, 0, cps.size()), 1, &cuts); break;
  }
  std::vector<std::string> words;
  words.reserve(cuts.size());
  size_t start = 0;
  for (size_t cut : cuts) {
    std::string word;
    for (size_t k = start; k < cut; ++k) AppendUtf8(cps[k], &word);
    words.push_back(std::move(word));
    start = cut;
  }
  return words;
}

}  // namespace tq::engine
