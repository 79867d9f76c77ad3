// SentencePiece-style BPE (tokenizer.ggml.model "llama"): start from the UTF-8 characters of the escaped
// text, repeatedly merge the adjacent pair whose concatenation is a vocabulary token with the highest score
// (ties: the leftmost pair), then emit each final symbol's token, or its bytes as <0xXX> tokens when it is
// none.
#include <algorithm>
#include <queue>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"

namespace tq::engine {
namespace {

struct Symbol {
  size_t begin;  // byte offset into the text
  size_t len;    // 0 once merged into its left neighbour
  int prev;      // index of the previous live symbol, -1 at the start
  int next;      // index of the next live symbol, -1 at the end
};

struct Candidate {
  int left;
  int right;
  float score;
  size_t len;  // bytes of the merged text, to detect a stale candidate
};

struct CandidateOrder {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);  // top: best score, then leftmost
  }
};

}  // namespace

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
  std::vector<Symbol> symbols;
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = std::min<size_t>(
        static_cast<size_t>(Utf8SequenceLength(static_cast<uint8_t>(text[pos]))), text.size() - pos);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({pos, len, index - 1, pos + len < text.size() ? index + 1 : -1});
    pos += len;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, CandidateOrder> queue;
  const auto try_pair = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[static_cast<size_t>(left)];
    const Symbol& r = symbols[static_cast<size_t>(right)];
    const TokenId id = TextToToken(text.substr(l.begin, l.len + r.len));
    if (id == kNoToken) return;
    queue.push({left, right, scores_[static_cast<size_t>(id)], l.len + r.len});
  };
  for (size_t k = 1; k < symbols.size(); ++k) try_pair(static_cast<int>(k - 1), static_cast<int>(k));
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = symbols[static_cast<size_t>(c.left)];
    Symbol& r = symbols[static_cast<size_t>(c.right)];
    if (l.len == 0 || r.len == 0 || l.len + r.len != c.len) continue;  // a side changed since it was queued
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[static_cast<size_t>(r.next)].prev = c.left;
    try_pair(l.prev, c.left);
    try_pair(c.left, l.next);
  }
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
