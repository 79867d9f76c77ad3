// Byte-level BPE (tokenizer.ggml.model "gpt2"): pre-tokenize into words, spell each word's bytes in the GPT-2
// alphabet, then repeatedly merge the adjacent pair with the lowest merge rank (ties: the leftmost pair).
#include <optional>

#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/pair_merge.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"

namespace tq::engine {

using tokenizer_internal::MergePairs;
using tokenizer_internal::Symbol;

void Tokenizer::EncodeBpe(std::string_view text, std::vector<TokenId>* out) const {
  for (const std::string& word : PreTokenize(pre_, text)) EncodeBpeWord(word, out);
}

void Tokenizer::EncodeBpeWord(std::string_view raw_word, std::vector<TokenId>* out) const {
  // The word spelled in the byte alphabet; one symbol per byte, its token from the per-byte table.
  std::string spelled;
  spelled.reserve(raw_word.size() * 2);
  std::vector<size_t> lens;
  std::vector<TokenId> ids;  // per symbol: the token its text spells, kNoToken if none
  lens.reserve(raw_word.size());
  ids.reserve(raw_word.size());
  for (size_t k = 0; k < raw_word.size(); ++k) {
    const uint8_t byte = static_cast<uint8_t>(raw_word[k]);
    const size_t begin = spelled.size();
    AppendUtf8(ByteToUnicode(byte), &spelled);
    lens.push_back(spelled.size() - begin);
    ids.push_back(byte_char_tokens_[byte]);
  }
  std::vector<Symbol> symbols = tokenizer_internal::LinkSymbols(lens);
  const std::string_view word = spelled;
  // Llama 3's tokenizer ignores the merges for a word that is a token as a whole.
  if (pre_ == PreTokenizer::kLlama3) {
    if (const TokenId id = TextToToken(word); id != kNoToken) {
      out->push_back(id);
      return;
    }
  }
  // Lowest merge rank first: by token ids where both sides are tokens, else by the merge's text.
  std::string key;
  const auto rank_of = [&](int left, int right) -> std::optional<int32_t> {
    const Symbol& l = symbols[static_cast<size_t>(left)];
    const Symbol& r = symbols[static_cast<size_t>(right)];
    const TokenId lid = ids[static_cast<size_t>(left)], rid = ids[static_cast<size_t>(right)];
    if (lid != kNoToken && rid != kNoToken) {
      auto it = merge_ranks_.find(MergeKey(lid, rid));
      if (it != merge_ranks_.end()) return it->second;
    } else if (!merge_text_ranks_.empty()) {
      key.assign(word.substr(l.begin, l.len));
      key += ' ';
      key += word.substr(r.begin, r.len);
      auto it = merge_text_ranks_.find(key);
      if (it != merge_text_ranks_.end()) return it->second;
    }
    return std::nullopt;
  };
  MergePairs<int32_t>(
      symbols, rank_of, [](int32_t a, int32_t b) { return a < b; },
      [&](int left) {
        const Symbol& l = symbols[static_cast<size_t>(left)];
        ids[static_cast<size_t>(left)] = TextToToken(word.substr(l.begin, l.len));
      });
  for (int k = symbols.empty() ? -1 : 0; k != -1; k = symbols[static_cast<size_t>(k)].next) {
    const Symbol& s = symbols[static_cast<size_t>(k)];
    const std::string_view piece = word.substr(s.begin, s.len);
    if (const TokenId id = ids[static_cast<size_t>(k)]; id != kNoToken) {
      out->push_back(id);
      continue;
    }
    // Not in the vocabulary (a vocabulary without every byte): fall back to single-byte tokens.
    for (char byte : piece) {
      const TokenId b = TextToToken(std::string_view(&byte, 1));
      if (b != kNoToken) out->push_back(b);
    }
  }
}

}  // namespace tq::engine
