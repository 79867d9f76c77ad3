// Constrained decoding over xgrammar: specs compile to a grammar matched against the vocabulary (compiled once per
// distinct spec, cached), and each constrained sequence keeps a matcher that masks the logits at every step so the
// sampler only sees tokens that keep the output a valid prefix of the language. xgrammar throws; every entry point
// here catches and returns a Status.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include <xgrammar/xgrammar.h>

#include "common/status.h"
#include "engine/grammar/constraint.h"
#include "engine/tokenizer/tokenizer.h"

namespace tq::engine {

class CompiledConstraint {
 public:
  CompiledConstraint(ConstraintKind kind, xgrammar::CompiledGrammar grammar)
      : kind_(kind), grammar_(std::move(grammar)) {}
  ConstraintKind kind() const { return kind_; }
  const xgrammar::CompiledGrammar& grammar() const { return grammar_; }

 private:
  ConstraintKind kind_;
  xgrammar::CompiledGrammar grammar_;
};

class ConstraintCompiler {
 public:
  // `vocab_size` is the width of the model's logits (>= the tokenizer's vocabulary; the rest are never allowed).
  // Control, unknown and unused tokens are never allowed either, except control tokens whose text is one of
  // `marker_texts` (grammars may produce them as that text); the end-of-generation tokens end the output.
  static StatusOr<std::unique_ptr<ConstraintCompiler>> Create(const Tokenizer& tokenizer, int vocab_size,
                                                              const std::vector<std::string>& marker_texts = {});

  // invalid_argument naming the problem for a bad or unsupported spec. Safe to call from any thread; compiled
  // grammars are cached by the spec's text (bounded, kCacheBytes).
  StatusOr<std::shared_ptr<const CompiledConstraint>> Compile(const ConstraintSpec& spec);

  int vocab_size() const { return vocab_size_; }

  static constexpr int64_t kCacheBytes = 256ll << 20;

 private:
  ConstraintCompiler(xgrammar::TokenizerInfo info, int vocab_size);

  int vocab_size_;
  std::mutex mu_;  // xgrammar's compiler is called by one thread at a time
  xgrammar::GrammarCompiler compiler_;
};

// One sequence's position in its grammar. Not thread-safe (the engine thread owns it).
class TokenMatcher {
 public:
  explicit TokenMatcher(std::shared_ptr<const CompiledConstraint> constraint, int vocab_size);

  // Sets logits[t] = -inf for every token t that the grammar does not allow next. logits: [vocab_size].
  void Mask(std::span<float> logits);
  // Advances past `token`; false when the grammar does not allow it (then the state is unchanged).
  bool Accept(int32_t token);
  // The output is complete: an end-of-generation token was accepted, or nothing more can follow.
  bool terminated() const;

 private:
  std::shared_ptr<const CompiledConstraint> constraint_;
  xgrammar::GrammarMatcher matcher_;
  int vocab_size_;
  std::vector<int32_t> bits_;  // [ceil(vocab_size / 32)]: bit t % 32 of word t / 32 set = token t allowed
};

}  // namespace tq::engine
