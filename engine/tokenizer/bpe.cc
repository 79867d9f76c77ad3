// Byte-level BPE (tokenizer.ggml.model "gpt2"): pre-tokenize into words, spell each word's bytes in the GPT-2
// alphabet, then repeatedly merge the adjacent pair with the lowest merge rank (ties: the leftmost pair).
#include <queue>

#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"

namespace tq::engine {
namespace {

struct Symbol {
  size_t begin;  // byte offset into the word
  size_t len;    // 0 once merged into its left neighbour
  int prev;
  int next;
  TokenId id;  // the token spelled by the symbol's text, kNoToken if none
};

struct Candidate {
  int left;
  int right;
  int32_t rank;
  size_t len;
};

struct CandidateOrder {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);  // top: lowest rank, then leftmost
  }
};

}  // namespace

void Tokenizer::EncodeBpe(std::string_view text, std::vector<TokenId>* out) const {
  for (const std::string& word : PreTokenize(pre_, text)) EncodeBpeWord(word, out);
}

void Tokenizer::EncodeBpeWord(std::string_view raw_word, std::vector<TokenId>* out) const {
  // The word spelled in the byte alphabet; one symbol per byte, its token from the per-byte table.
  std::string spelled;
  spelled.reserve(raw_word.size() * 2);
  std::vector<Symbol> symbols;
  symbols.reserve(raw_word.size());
  for (size_t k = 0; k < raw_word.size(); ++k) {
    const uint8_t byte = static_cast<uint8_t>(raw_word[k]);
    const size_t begin = spelled.size();
    AppendUtf8(ByteToUnicode(byte), &spelled);
    const int index = static_cast<int>(k);
    symbols.push_back({begin, spelled.size() - begin, index - 1, k + 1 < raw_word.size() ? index + 1 : -1,
                       byte_char_tokens_[byte]});
  }
  const std::string_view word = spelled;
  // Llama 3's tokenizer ignores the merges for a word that is a token as a whole.
  if (pre_ == PreTokenizer::kLlama3) {
    if (const TokenId id = TextToToken(word); id != kNoToken) {
      out->push_back(id);
      return;
    }
  }
  std::priority_queue<Candidate, std::vector<Candidate>, CandidateOrder> queue;
  std::string key;
  const auto try_pair = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[static_cast<size_t>(left)];
    const Symbol& r = symbols[static_cast<size_t>(right)];
    int32_t rank = -1;
    if (l.id != kNoToken && r.id != kNoToken) {
      auto it = merge_ranks_.find(MergeKey(l.id, r.id));
      if (it != merge_ranks_.end()) rank = it->second;
    } else if (!merge_text_ranks_.empty()) {
      key.assign(word.substr(l.begin, l.len));
      key += ' ';
      key += word.substr(r.begin, r.len);
      auto it = merge_text_ranks_.find(key);
      if (it != merge_text_ranks_.end()) rank = it->second;
    }
    if (rank >= 0) queue.push({left, right, rank, l.len + r.len});
  };
  for (size_t k = 1; k < symbols.size(); ++k) try_pair(static_cast<int>(k - 1), static_cast<int>(k));
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = symbols[static_cast<size_t>(c.left)];
    Symbol& r = symbols[static_cast<size_t>(c.right)];
    if (l.len == 0 || r.len == 0 || l.len + r.len != c.len) continue;
    l.len += r.len;
    l.id = TextToToken(word.substr(l.begin, l.len));
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[static_cast<size_t>(r.next)].prev = c.left;
    try_pair(l.prev, c.left);
    try_pair(c.left, l.next);
  }
  for (int k = symbols.empty() ? -1 : 0; k != -1; k = symbols[static_cast<size_t>(k)].next) {
    const Symbol& s = symbols[static_cast<size_t>(k)];
    const std::string_view piece = word.substr(s.begin, s.len);
    if (s.id != kNoToken) {
      out->push_back(s.id);
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
