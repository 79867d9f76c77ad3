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
  for (const std::string& word : PreTokenize(pre_, text)) EncodeBpeWord(BytesToByteLevel(word), out);
}

void Tokenizer::EncodeBpeWord(std::string_view word, std::vector<TokenId>* out) const {
  // Llama 3's tokenizer ignores the merges for a word that is a token as a whole.
  if (pre_ == PreTokenizer::kLlama3) {
    if (const TokenId id = TextToToken(word); id != kNoToken) {
      out->push_back(id);
      return;
    }
  }
  std::vector<Symbol> symbols;
  for (size_t pos = 0; pos < word.size();) {
    const size_t len = std::min<size_t>(
        static_cast<size_t>(Utf8SequenceLength(static_cast<uint8_t>(word[pos]))), word.size() - pos);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({pos, len, index - 1, pos + len < word.size() ? index + 1 : -1});
    pos += len;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, CandidateOrder> queue;
  std::string key;
  const auto try_pair = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[static_cast<size_t>(left)];
    const Symbol& r = symbols[static_cast<size_t>(right)];
    key.assign(word.substr(l.begin, l.len));
    key += ' ';
    key += word.substr(r.begin, r.len);
    auto it = merge_ranks_.find(key);
    if (it == merge_ranks_.end()) return;
    queue.push({left, right, it->second, l.len + r.len});
  };
  for (size_t k = 1; k < symbols.size(); ++k) try_pair(static_cast<int>(k - 1), static_cast<int>(k));
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = symbols[static_cast<size_t>(c.left)];
    Symbol& r = symbols[static_cast<size_t>(c.right)];
    if (l.len == 0 || r.len == 0 || l.len + r.len != c.len) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[static_cast<size_t>(r.next)].prev = c.left;
    try_pair(l.prev, c.left);
    try_pair(c.left, l.next);
  }
  for (int k = symbols.empty() ? -1 : 0; k != -1; k = symbols[static_cast<size_t>(k)].next) {
    const Symbol& s = symbols[static_cast<size_t>(k)];
    const std::string_view piece = word.substr(s.begin, s.len);
    const TokenId id = TextToToken(piece);
    if (id != kNoToken) {
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
