// Tokenizer loading from GGUF metadata, special-token handling, and decoding. The merge algorithms are in
// spm.cc and bpe.cc.
#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <deque>

#include "engine/tokenizer/byte_level.h"

namespace tq::engine {
namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space

// Optional token id key: absent or the "no token" markers (-1, UINT32_MAX) give kNoToken.
StatusOr<TokenId> ReadTokenId(const GgufFile& gguf, std::string_view key, size_t n_vocab) {
  const GgufValue* v = gguf.Find(key);
  if (v == nullptr) return kNoToken;
  if (!v->IsInteger()) {
    return InvalidArgumentError("GGUF key '" + std::string(key) + "': expected an integer token id, got " +
                                std::string(GgufValueTypeName(v->type)));
  }
  int64_t id = v->i;
  if (v->type == GgufValueType::kUint64 && v->u > 0xFFFFFFFFull) {
    id = -2;  // out of range below
  } else if (v->type == GgufValueType::kUint8 || v->type == GgufValueType::kUint16 ||
             v->type == GgufValueType::kUint32 || v->type == GgufValueType::kUint64) {
    id = static_cast<int64_t>(v->u);
  }
  if (id == -1 || id == 0xFFFFFFFFll) return kNoToken;
  if (id < 0 || static_cast<uint64_t>(id) >= n_vocab) {
    return InvalidArgumentError("GGUF key '" + std::string(key) + "': token id " + std::to_string(id) +
                                " is outside the vocabulary of " + std::to_string(n_vocab));
  }
  return static_cast<TokenId>(id);
}

// Linear time: builds a new string instead of replacing in place.
// The byte of a "<0xXX>" token, or -1 when the text is not of that form.
int ParseByteToken(std::string_view text) {
  if (text.size() != 6 || !text.starts_with("<0x") || text[5] != '>') return -1;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    const int digit = (c >= '0' && c <= '9')   ? c - '0'
                      : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                      : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                               : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

void ReplaceAll(std::string* s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s->size());
  size_t start = 0;
  for (size_t pos; (pos = s->find(from, start)) != std::string::npos; start = pos + from.size()) {
    out.append(*s, start, pos - start);
    out += to;
  }
  out.append(*s, start);
  *s = std::move(out);
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& gguf) {
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  TQ_RETURN_IF_ERROR_CTX(tok->Load(gguf), "tokenizer");
  return tok;
}

Status Tokenizer::Load(const GgufFile& gguf) {
  TQ_ASSIGN_OR_RETURN(std::string_view model, gguf.GetString("tokenizer.ggml.model"));
  if (model == "llama") {
    kind_ = TokenizerKind::kSentencePiece;
  } else if (model == "gpt2") {
    kind_ = TokenizerKind::kByteLevelBpe;
  } else {
    return UnimplementedError("GGUF key 'tokenizer.ggml.model': tokenizer model '" + std::string(model) +
                              "' is not supported (llama, gpt2)");
  }
  TQ_ASSIGN_OR_RETURN(std::span<const std::string_view> tokens, gguf.GetStringArray("tokenizer.ggml.tokens"));
  if (tokens.empty()) return InvalidArgumentError("GGUF key 'tokenizer.ggml.tokens' is empty");
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return InvalidArgumentError("GGUF key 'tokenizer.ggml.tokens': too many tokens");
  }
  const size_t n = tokens.size();
  tokens_.assign(tokens.begin(), tokens.end());
  token_ids_.max_load_factor(0.5f);  // short bucket chains: lookups dominate encoding time
  token_ids_.reserve(n);
  for (size_t id = 0; id < n; ++id) token_ids_.emplace(tokens_[id], static_cast<TokenId>(id));  // first wins

  scores_.assign(n, 0.0f);
  if (gguf.Find("tokenizer.ggml.scores") != nullptr) {
    TQ_ASSIGN_OR_RETURN(scores_, gguf.GetFloatArray("tokenizer.ggml.scores"));
    if (scores_.size() != n) {
      return InvalidArgumentError("GGUF key 'tokenizer.ggml.scores' has " + std::to_string(scores_.size()) +
                                  " entries for " + std::to_string(n) + " tokens");
    }
  }
  types_.assign(n, TokenType::kNormal);
  if (gguf.Find("tokenizer.ggml.token_type") != nullptr) {
    TQ_ASSIGN_OR_RETURN(std::vector<int64_t> types, gguf.GetIntArray("tokenizer.ggml.token_type"));
    if (types.size() != n) {
      return InvalidArgumentError("GGUF key 'tokenizer.ggml.token_type' has " + std::to_string(types.size()) +
                                  " entries for " + std::to_string(n) + " tokens");
    }
    for (size_t id = 0; id < n; ++id) {
      if (types[id] < 1 || types[id] > 6) {
        return InvalidArgumentError("GGUF key 'tokenizer.ggml.token_type': token " + std::to_string(id) +
                                    " has unknown type " + std::to_string(types[id]));
      }
      types_[id] = static_cast<TokenType>(types[id]);
    }
  }

  if (kind_ == TokenizerKind::kByteLevelBpe) {
    TQ_ASSIGN_OR_RETURN(std::span<const std::string_view> merges,
                        gguf.GetStringArray("tokenizer.ggml.merges"));
    for (int b = 0; b < 256; ++b) {
      byte_char_tokens_[static_cast<size_t>(b)] =
          TextToToken(BytesToByteLevel(std::string(1, static_cast<char>(b))));
    }
    merge_ranks_.max_load_factor(0.5f);
    merge_ranks_.reserve(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const size_t space = merges[rank].find(' ', 1);
      if (space == std::string_view::npos) {
        return InvalidArgumentError("GGUF key 'tokenizer.ggml.merges': entry " + std::to_string(rank) +
                                    " is not two tokens separated by a space");
      }
      const TokenId left = TextToToken(merges[rank].substr(0, space));
      const TokenId right = TextToToken(merges[rank].substr(space + 1));
      if (left != kNoToken && right != kNoToken) {
        merge_ranks_.emplace(MergeKey(left, right), static_cast<int32_t>(rank));
      } else {
        merge_text_ranks_.emplace(std::string(merges[rank]), static_cast<int32_t>(rank));
      }
    }
    TQ_ASSIGN_OR_RETURN(std::string_view pre, gguf.GetStringOr("tokenizer.ggml.pre", "gpt-2"));
    std::optional<PreTokenizer> p = PreTokenizerFromName(pre);
    if (!p) {
      return UnimplementedError("GGUF key 'tokenizer.ggml.pre': pre-tokenizer '" + std::string(pre) +
                                "' is not supported (" + SupportedPreTokenizerNames() + ")");
    }
    pre_ = *p;
    pre_name_ = std::string(pre);
  } else {
    TQ_ASSIGN_OR_RETURN(std::string_view pre, gguf.GetStringOr("tokenizer.ggml.pre", "default"));
    pre_name_ = std::string(pre);
  }

  TQ_ASSIGN_OR_RETURN(bos_, ReadTokenId(gguf, "tokenizer.ggml.bos_token_id", n));
  TQ_ASSIGN_OR_RETURN(eos_, ReadTokenId(gguf, "tokenizer.ggml.eos_token_id", n));
  TQ_ASSIGN_OR_RETURN(unk_, ReadTokenId(gguf, "tokenizer.ggml.unknown_token_id", n));
  TQ_ASSIGN_OR_RETURN(pad_, ReadTokenId(gguf, "tokenizer.ggml.padding_token_id", n));
  TQ_ASSIGN_OR_RETURN(TokenId eot, ReadTokenId(gguf, "tokenizer.ggml.eot_token_id", n));
  TQ_ASSIGN_OR_RETURN(TokenId eom, ReadTokenId(gguf, "tokenizer.ggml.eom_token_id", n));
  const bool spm = kind_ == TokenizerKind::kSentencePiece;
  const bool llama3 = pre_ == PreTokenizer::kLlama3 && !spm;
  // Without the key, BOS is added for SentencePiece and Llama 3 vocabularies that have one.
  TQ_ASSIGN_OR_RETURN(add_bos_,
                      gguf.GetBoolOr("tokenizer.ggml.add_bos_token", (spm || llama3) && bos_ != kNoToken));
  TQ_ASSIGN_OR_RETURN(add_eos_, gguf.GetBoolOr("tokenizer.ggml.add_eos_token", false));
  TQ_ASSIGN_OR_RETURN(add_space_prefix_, gguf.GetBoolOr("tokenizer.ggml.add_space_prefix", spm));
  if (add_bos_ && bos_ == kNoToken) {
    return InvalidArgumentError("GGUF key 'tokenizer.ggml.add_bos_token' is true but there is no BOS token");
  }
  if (add_eos_ && eos_ == kNoToken) {
    return InvalidArgumentError("GGUF key 'tokenizer.ggml.add_eos_token' is true but there is no EOS token");
  }

  if (spm) {
    for (size_t id = 0; id < n && spm_cross_word_tokens_.size() <= kMaxCrossWordTokens; ++id) {
      const std::string& token = tokens_[id];
      for (size_t pos = token.find(kSpmSpace, 1); pos != std::string::npos;
           pos = token.find(kSpmSpace, pos + 1)) {
        if (pos < kSpmSpace.size() ||
            token.compare(pos - kSpmSpace.size(), kSpmSpace.size(), kSpmSpace) != 0) {
          spm_cross_word_tokens_.push_back(static_cast<TokenId>(id));
          break;
        }
      }
    }
  }

  for (size_t id = 0; id < n; ++id) {
    const TokenType t = types_[id];
    if ((t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown) &&
        !tokens_[id].empty()) {
      specials_.push_back(static_cast<TokenId>(id));
    }
  }
  std::stable_sort(specials_.begin(), specials_.end(), [&](TokenId a, TokenId b) {
    return tokens_[static_cast<size_t>(a)].size() > tokens_[static_cast<size_t>(b)].size();
  });

  // End of generation: the ids from metadata plus control tokens that end a turn in common chat formats.
  for (TokenId id : {eos_, eot, eom}) {
    if (id != kNoToken) eog_.push_back(id);
  }
  for (std::string_view text :
       {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>"}) {
    const TokenId id = TextToToken(text);
    if (id != kNoToken && types_[static_cast<size_t>(id)] == TokenType::kControl) eog_.push_back(id);
  }
  std::sort(eog_.begin(), eog_.end());
  eog_.erase(std::unique(eog_.begin(), eog_.end()), eog_.end());
  return Status::Ok();
}

TokenId Tokenizer::TextToToken(std::string_view text) const {
  auto it = token_ids_.find(text);
  return it == token_ids_.end() ? kNoToken : it->second;
}

bool Tokenizer::IsEndOfGeneration(TokenId id) const {
  return std::binary_search(eog_.begin(), eog_.end(), id);
}

TokenId Tokenizer::ByteToken(uint8_t byte) const {
  char buf[8];
  std::snprintf(buf, sizeof buf, "<0x%02X>", byte);
  TokenId id = TextToToken(buf);
  if (id == kNoToken) id = TextToToken(std::string_view(reinterpret_cast<const char*>(&byte), 1));
  return id != kNoToken ? id : unk_;
}

std::vector<TokenId> Tokenizer::Encode(std::string_view text, const EncodeOptions& options) const {
  const TextSegment segment{text, options.parse_special};
  return EncodeSegments({&segment, 1}, options.add_special);
}

std::vector<TokenId> Tokenizer::EncodeSegments(std::span<const TextSegment> segments, bool add_special) const {
  std::vector<Fragment> fragments;
  for (const TextSegment& s : segments) SplitSpecials(s.text, s.parse_special, &fragments);
  // Adjacent raw pieces (from neighbouring segments) are encoded as one text: joined copies live in `joined`.
  std::deque<std::string> joined;
  std::vector<Fragment> merged;
  for (const Fragment& f : fragments) {
    if (f.token == kNoToken && !merged.empty() && merged.back().token == kNoToken) {
      joined.emplace_back(std::string(merged.back().text) + std::string(f.text));
      merged.back().text = joined.back();
      continue;
    }
    if (f.token != kNoToken || !f.text.empty()) merged.push_back(f);
  }
  std::vector<TokenId> out;
  if (add_special && add_bos_) out.push_back(bos_);
  EncodeFragments(merged, &out);
  if (add_special && add_eos_) out.push_back(eos_);
  return out;
}

void Tokenizer::SplitSpecials(std::string_view text, bool parse_special, std::vector<Fragment>* out) const {
  if (text.empty()) return;
  std::vector<Fragment> fragments = {{text, kNoToken}};
  for (TokenId special : specials_) {
    const TokenType type = types_[static_cast<size_t>(special)];
    if (!parse_special && type != TokenType::kUserDefined) continue;
    const std::string& needle = tokens_[static_cast<size_t>(special)];
    if (text.find(needle) == std::string_view::npos) continue;  // nowhere in the text: fragments unchanged
    std::vector<Fragment> next;
    for (const Fragment& f : fragments) {
      if (f.token != kNoToken) {
        next.push_back(f);
        continue;
      }
      size_t start = 0;
      for (size_t pos; (pos = f.text.find(needle, start)) != std::string_view::npos;
           start = pos + needle.size()) {
        if (pos > start) next.push_back({f.text.substr(start, pos - start), kNoToken});
        next.push_back({{}, special});
      }
      if (start < f.text.size()) next.push_back({f.text.substr(start), kNoToken});
    }
    fragments = std::move(next);
  }
  out->insert(out->end(), fragments.begin(), fragments.end());
}

void Tokenizer::EncodeFragments(std::span<const Fragment> fragments, std::vector<TokenId>* out) const {
  bool prev_special = true;  // SentencePiece: a space prefix goes before the first text and after a special
  for (const Fragment& f : fragments) {
    if (f.token != kNoToken) {
      out->push_back(f.token);
      prev_special = true;
      continue;
    }
    if (kind_ == TokenizerKind::kSentencePiece) {
      std::string escaped = (add_space_prefix_ && prev_special) ? " " : "";
      escaped += f.text;
      ReplaceAll(&escaped, " ", kSpmSpace);
      EncodeSpm(escaped, out);
    } else {
      EncodeBpe(f.text, out);
    }
    prev_special = false;
  }
}

std::string Tokenizer::TokenToPiece(TokenId id, bool unparse_special) const {
  if (id < 0 || id >= vocab_size()) return {};
  const std::string& text = tokens_[static_cast<size_t>(id)];
  switch (types_[static_cast<size_t>(id)]) {
    case TokenType::kControl: return unparse_special ? text : std::string();
    case TokenType::kUserDefined: return text;
    case TokenType::kUnused: return {};
    case TokenType::kUnknown:  // its text when special tokens are printed; SentencePiece shows U+2585
                               // otherwise
      return (unparse_special || kind_ == TokenizerKind::kByteLevelBpe) ? text : std::string("\xE2\x96\x85");
    case TokenType::kByte:
      if (kind_ == TokenizerKind::kSentencePiece) {
        if (const int byte = ParseByteToken(text); byte >= 0) return std::string(1, static_cast<char>(byte));
      }
      break;  // a malformed byte token prints as its text
    case TokenType::kNormal: break;
  }
  if (kind_ == TokenizerKind::kByteLevelBpe) return ByteLevelToBytes(text);
  std::string piece = text;
  ReplaceAll(&piece, kSpmSpace, " ");
  return piece;
}

std::string Tokenizer::Decode(std::span<const TokenId> ids, const DecodeOptions& options) const {
  if (options.remove_special) {
    if (add_bos_ && !ids.empty() && ids.front() == bos_) ids = ids.subspan(1);
    if (add_eos_ && !ids.empty() && ids.back() == eos_) ids = ids.first(ids.size() - 1);
  }
  std::string out;
  bool strip_space = kind_ == TokenizerKind::kSentencePiece && add_space_prefix_;
  for (TokenId id : ids) {
    std::string piece = TokenToPiece(id, options.unparse_special);
    // The space prefix that encoding added to the text comes back on the first piece: drop it once.
    if (strip_space && !piece.empty()) {
      if (piece[0] == ' ') piece.erase(0, 1);
      strip_space = false;
    }
    out += piece;
  }
  return out;
}

}  // namespace tq::engine
