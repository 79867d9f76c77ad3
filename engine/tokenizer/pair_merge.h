// The merge loop shared by the BPE and SentencePiece tokenizers: a linked list of symbols (byte ranges of a text)
// and a priority queue of adjacent pairs; the best pair anywhere merges first (ties: the leftmost), a merge
// re-queues the new symbol's two neighbours, and stale candidates (a side changed since queued) are skipped.
// Internal to engine/tokenizer.
#pragma once

#include <cstddef>
#include <optional>
#include <queue>
#include <vector>

namespace tq::engine::tokenizer_internal {

struct Symbol {
  size_t begin;  // byte offset into the text
  size_t len;    // 0 once merged into its left neighbour
  int prev;      // index of the previous live symbol, -1 at the start
  int next;      // index of the next live symbol, -1 at the end
};

// One symbol per piece of `lens` bytes, in order, linked.
inline std::vector<Symbol> LinkSymbols(const std::vector<size_t>& lens) {
  std::vector<Symbol> symbols;
  symbols.reserve(lens.size());
  size_t begin = 0;
  for (size_t k = 0; k < lens.size(); ++k) {
    const int index = static_cast<int>(k);
    symbols.push_back({begin, lens[k], index - 1, k + 1 < lens.size() ? index + 1 : -1});
    begin += lens[k];
  }
  return symbols;
}

// priority(left, right) -> std::optional<P>: the pair's priority, or none when it does not merge.
// better(a, b): whether priority a merges before b. merged(left): called after `left` absorbed its right neighbour.
template <typename P, typename PriorityFn, typename BetterFn, typename MergedFn>
void MergePairs(std::vector<Symbol>& symbols, PriorityFn priority, BetterFn better, MergedFn merged) {
  struct Candidate {
    int left;
    int right;
    P priority;
    size_t len;  // bytes of the merged text, to detect a stale candidate
  };
  const auto below = [&](const Candidate& a, const Candidate& b) {  // b comes out of the queue first
    if (better(b.priority, a.priority)) return true;
    if (better(a.priority, b.priority)) return false;
    return a.left > b.left;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(below)> queue(below);
  const auto try_pair = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    if (std::optional<P> p = priority(left, right)) {
      queue.push({left, right, *p, symbols[static_cast<size_t>(left)].len + symbols[static_cast<size_t>(right)].len});
    }
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
    merged(c.left);
    try_pair(l.prev, c.left);
    try_pair(c.left, l.next);
  }
}

}  // namespace tq::engine::tokenizer_internal
