#include "engine/grammar/grammar.h"

#include <algorithm>
#include <limits>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/grammar/schema_check.h"

namespace tq::engine {

std::string_view ConstraintKindName(ConstraintKind kind) {
  switch (kind) {
    case ConstraintKind::kJsonObject: return "json_object";
    case ConstraintKind::kJsonSchema: return "json_schema";
    case ConstraintKind::kRegex: return "regex";
    case ConstraintKind::kEbnf: return "ebnf";
    case ConstraintKind::kStructuralTag: return "structural_tag";
  }
  return "unknown";
}

namespace {

// Whitespace the JSON grammars allow between tokens, at most this many characters at a time: enough for
// indented output, not enough for a small model to loop on newlines until max_tokens.
constexpr int kMaxJsonWhitespace = 16;

// xgrammar reports errors by throwing std::runtime_error subclasses; this is the one place they become a Status.
template <typename F>
auto CatchXgrammar(std::string_view what, F&& f) -> StatusOr<decltype(f())> {
  try {
    return f();
  } catch (const std::exception& e) {
    std::string message = e.what();
    // xgrammar prefixes file and line of its own source; keep the sentence after them.
    if (auto p = message.rfind(": "); p != std::string::npos && message.find(".cc:") != std::string::npos &&
                                      message.find(".cc:") < p) {
      message = message.substr(p + 2);
    }
    return InvalidArgumentError(std::string(what) + ": " + message);
  }
}

}  // namespace

ConstraintCompiler::ConstraintCompiler(xgrammar::TokenizerInfo info, int vocab_size)
    : vocab_size_(vocab_size),
      compiler_(info, static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u)),
                /*cache_enabled=*/true, kCacheBytes) {}

StatusOr<std::unique_ptr<ConstraintCompiler>> ConstraintCompiler::Create(const Tokenizer& tokenizer, int vocab_size,
                                                                          const std::vector<std::string>& marker_texts) {
  const int n = tokenizer.vocab_size();
  if (vocab_size < n) {
    return InvalidArgumentError("the model's vocabulary (" + std::to_string(vocab_size) +
                                ") is smaller than the tokenizer's (" + std::to_string(n) + ")");
  }
  // Each token's bytes as the output would spell them; "" marks a token no grammar may produce (xgrammar's
  // convention for special tokens). The end-of-generation tokens are the grammar's stop tokens.
  std::vector<std::string> vocab(static_cast<size_t>(n));
  for (TokenId id = 0; id < n; ++id) {
    const TokenType type = tokenizer.token_type(id);
    if (type == TokenType::kControl && !tokenizer.IsEndOfGeneration(id) &&
        std::find(marker_texts.begin(), marker_texts.end(), tokenizer.token_text(id)) != marker_texts.end()) {
      vocab[static_cast<size_t>(id)] = tokenizer.token_text(id);
      continue;
    }
    if (type == TokenType::kControl || type == TokenType::kUnknown || type == TokenType::kUnused) continue;
    vocab[static_cast<size_t>(id)] = tokenizer.TokenToPiece(id);
  }
  std::vector<int32_t> stops(tokenizer.end_of_generation().begin(), tokenizer.end_of_generation().end());
  if (stops.empty() && tokenizer.eos() != kNoToken) stops.push_back(tokenizer.eos());
  auto info = CatchXgrammar("tokenizer", [&] {
    return xgrammar::TokenizerInfo(vocab, xgrammar::VocabType::RAW, vocab_size, stops, /*add_prefix_space=*/false);
  });
  if (!info.ok()) return info.status();
  auto compiler = CatchXgrammar("grammar compiler", [&] {
    return std::unique_ptr<ConstraintCompiler>(new ConstraintCompiler(std::move(info).value(), vocab_size));
  });
  if (!compiler.ok()) return compiler.status();
  return std::move(compiler).value();
}

StatusOr<std::shared_ptr<const CompiledConstraint>> ConstraintCompiler::Compile(const ConstraintSpec& spec) {
  std::string schema;
  bool strict = spec.strict;
  switch (spec.kind) {
    case ConstraintKind::kJsonObject:
      schema = R"({"type": "object"})";
      strict = false;
      break;
    case ConstraintKind::kJsonSchema: {
      nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(spec.source, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded()) return InvalidArgumentError("the JSON schema is not valid JSON");
      TQ_RETURN_IF_ERROR(CheckJsonSchema(parsed, spec.max_depth));
      schema = parsed.dump();  // compact, properties in the order given (the output keeps it)
      break;
    }
    case ConstraintKind::kRegex:
    case ConstraintKind::kEbnf:
    case ConstraintKind::kStructuralTag:
      if (spec.source.empty()) return InvalidArgumentError(std::string(ConstraintKindName(spec.kind)) + " is empty");
      break;
  }
  std::lock_guard<std::mutex> lock(mu_);
  static constexpr const char* kWhat[] = {"JSON object", "JSON schema", "regex", "grammar", "tool calls"};
  auto grammar = CatchXgrammar(kWhat[static_cast<int>(spec.kind)], [&]() -> xgrammar::CompiledGrammar {
    switch (spec.kind) {
      case ConstraintKind::kJsonObject:
      case ConstraintKind::kJsonSchema:
        return compiler_.CompileJSONSchema(schema, /*any_whitespace=*/true, std::nullopt, std::nullopt, strict,
                                           kMaxJsonWhitespace);
      case ConstraintKind::kRegex: return compiler_.CompileRegex(spec.source);
      case ConstraintKind::kEbnf: return compiler_.CompileGrammar(spec.source, "root");
      case ConstraintKind::kStructuralTag: return compiler_.CompileStructuralTag(spec.source);
    }
    throw std::runtime_error("unknown constraint kind");
  });
  if (!grammar.ok()) return grammar.status();
  return std::make_shared<const CompiledConstraint>(spec.kind, std::move(grammar).value());
}

TokenMatcher::TokenMatcher(std::shared_ptr<const CompiledConstraint> constraint, int vocab_size)
    : constraint_(std::move(constraint)),
      matcher_(constraint_->grammar()),
      vocab_size_(vocab_size),
      bits_(static_cast<size_t>(xgrammar::GetBitmaskSize(vocab_size))) {}

void TokenMatcher::Mask(std::span<float> logits) {
  int64_t shape[1] = {static_cast<int64_t>(bits_.size())};
  DLTensor t{};
  t.data = bits_.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = xgrammar::GetBitmaskDLType();
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  matcher_.FillNextTokenBitmask(&t);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const size_t n = std::min(logits.size(), static_cast<size_t>(vocab_size_));
  for (size_t w = 0; w * 32 < n; ++w) {
    const uint32_t word = static_cast<uint32_t>(bits_[w]);
    if (word == 0xffffffffu) continue;
    const size_t end = std::min(n, w * 32 + 32);
    for (size_t t_id = w * 32; t_id < end; ++t_id) {
      if (!((word >> (t_id - w * 32)) & 1u)) logits[t_id] = neg_inf;
    }
  }
  for (size_t t_id = n; t_id < logits.size(); ++t_id) logits[t_id] = neg_inf;
}

bool TokenMatcher::Accept(int32_t token) {
  if (token < 0 || token >= vocab_size_) return false;
  try {
    return matcher_.AcceptToken(token);
  } catch (const std::exception&) {
    return false;
  }
}

bool TokenMatcher::terminated() const { return matcher_.IsTerminated(); }

}  // namespace tq::engine
