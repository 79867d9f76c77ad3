// SentencePiece-style BPE (tokenizer.ggml.model "llama"): start from the UTF-8 characters of the escaped
// text, repeatedly merge the adjacent pair whose concatenation is a vocabulary token with the highest score
// (ties: the leftmost pair), then emit each final symbol's token, or its bytes as <0xXX> tokens when it is
// none.
#include <algorithm>
#include <optional>

#include "engine/tokenizer/pair_merge.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"

namespace tq::engine {

using tokenizer_internal::MergePairs;
using tokenizer_internal::Symbol;

// Merging is global (the best pair anywhere goes first), but a merged symbol is always a vocabulary token. A
// "word start" (a U+2581 after a character other than U+2581) can only be crossed by a token that holds
// U+2581 after another character, and only where such a token occurs in the text spanning it. All other word
// starts split the text into parts that merge independently, with the same result and much faster.
void Tokenizer::EncodeSpm(std::string_view text, std::vector<TokenId>* out) const {
  if (spm_cross_word_tokens_.size() > kMaxCrossWordTokens) {
    EncodeSpmSegment(text, out);
    return;
  }
  // Byte ranges (begin, end) that a word-crossing token covers where it occurs: no cut strictly inside them.
  std::vector<std::pair<size_t, size_t>> no_cut;
  for (TokenId id : spm_cross_word_tokens_) {
    const std::string& t = tokens_[static_cast<size_t>(id)];
    for (size_t p = text.find(t); p != std::string_view::npos; p = text.find(t, p + 1))
      no_cut.push_back({p, p + t.size()});
  }
  std::sort(no_cut.begin(), no_cut.end());
  constexpr std::string_view kSpace = "\xE2\x96\x81";
  size_t start = 0, next_range = 0,
         covered_until = 0;  // ranges beginning before pos cover up to covered_until
  for (size_t pos = text.find(kSpace, 1); pos != std::string_view::npos; pos = text.find(kSpace, pos + 1)) {
    if (pos >= kSpace.size() && text.substr(pos - kSpace.size(), kSpace.size()) == kSpace) continue;
    while (next_range < no_cut.size() && no_cut[next_range].first < pos) {
      covered_until = std::max(covered_until, no_cut[next_range++].second);
    }
    if (covered_until > pos) continue;
    EncodeSpmSegment(text.substr(start, pos - start), out);
    start = pos;
  }
  EncodeSpmSegment(text.substr(start), out);
}

void Tokenizer::EncodeSpmSegment(std::string_view text, std::vector<TokenId>* out) const {
  std::vector<size_t> lens;  // one symbol per UTF-8 character
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = std::min<size_t>(
        static_cast<size_t>(Utf8SequenceLength(static_cast<uint8_t>(text[pos]))), text.size() - pos);
    lens.push_back(len);
    pos += len;
  }
  std::vector<Symbol> symbols = tokenizer_internal::LinkSymbols(lens);
  // Highest score first, among pairs whose concatenation is a vocabulary token.
  const auto score_of = [&](int left, int right) -> std::optional<float> {
    const Symbol& l = symbols[static_cast<size_t>(left)];
    const Symbol& r = symbols[static_cast<size_t>(right)];
    const TokenId id = TextToToken(text.substr(l.begin, l.len + r.len));
    if (id == kNoToken) return std::nullopt;
    return scores_[static_cast<size_t>(id)];
  };
  MergePairs<float>(symbols, score_of, [](float a, float b) { return a > b; }, [](int) {});
  for (int k = symbols.empty() ? -1 : 0; k != -1; k = symbols[static_cast<size_t>(k)].next) {
    const Symbol& s = symbols[static_cast<size_t>(k)];
    const std::string_view piece = text.substr(s.begin, s.len);
    const TokenId id = TextToToken(piece);
    if (id != kNoToken) {
      out->push_back(id);
      continue;
    }
    // Byte fallback; a vocabulary with neither byte tokens nor an unknown token drops the byte.
    for (char byte : piece) {
      if (const TokenId b = ByteToken(static_cast<uint8_t>(byte)); b != kNoToken) out->push_back(b);
    }
  }
}

}  // namespace tq::engine
