// Tokenizers built from a GGUF file's tokenizer.ggml.* metadata:
//   model "llama": SentencePiece-style BPE (merge the adjacent pair whose merged token has the highest
//   score),
//                  byte fallback to <0xXX> tokens, optional leading-space prefix, ' ' escaped as U+2581.
//   model "gpt2":  byte-level BPE (GPT-2 byte-to-unicode alphabet, merges ranked by tokenizer.ggml.merges)
//   after
//                  a pre-tokenizer chosen by tokenizer.ggml.pre (pretokenize.h).
// Ids match llama.cpp's on its test vectors (tests/unit/engine/tokenizer_test.cc).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/model/gguf.h"
#include "engine/tokenizer/pretokenize.h"

namespace tq::engine {

using TokenId = int32_t;
inline constexpr TokenId kNoToken = -1;

// tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // BOS, EOS, chat markers: text only when asked for special tokens
  kUserDefined = 4,  // always matched as a whole in input text, printed as is
  kUnused = 5,
  kByte = 6,  // <0xXX> byte-fallback tokens
};

enum class TokenizerKind { kSentencePiece, kByteLevelBpe };

struct EncodeOptions {
  bool add_special = true;     // BOS (and EOS) as the metadata's add_bos_token / add_eos_token say
  bool parse_special = false;  // control tokens written in the text (e.g. "<|im_start|>") become their ids
};

// A piece of text to encode and whether control-token text inside it becomes control tokens: a chat prompt is the
// template's markers (parsed) between messages' content (not parsed: a user who types "<|im_end|>" gets text).
struct TextSegment {
  std::string_view text;
  bool parse_special = false;
};

struct DecodeOptions {
  bool remove_special = false;   // drop a leading BOS / trailing EOS that encoding added
  bool unparse_special = false;  // print control tokens' text instead of nothing
};

// Immutable once built: Encode and Decode are const and safe to call from many threads at once.
class Tokenizer {
 public:
  Tokenizer(const Tokenizer&) = delete;  // token_ids_ holds views into tokens_
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Reads tokenizer.ggml.{model,pre,tokens,scores,token_type,merges,*_token_id,add_*}. Errors name the key.
  static StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& gguf);

  std::vector<TokenId> Encode(std::string_view text, const EncodeOptions& options = {}) const;
  // The segments encoded as one text (plain runs of adjacent segments are encoded together, so the result equals
  // Encode of their concatenation wherever no control-token text sits in a segment that does not parse it).
  std::vector<TokenId> EncodeSegments(std::span<const TextSegment> segments, bool add_special) const;

  // The bytes of one token (may be part of a UTF-8 sequence).
  std::string TokenToPiece(TokenId id, bool unparse_special = false) const;
  std::string Decode(std::span<const TokenId> ids, const DecodeOptions& options = {}) const;

  TokenizerKind kind() const { return kind_; }
  std::string_view model_name() const { return kind_ == TokenizerKind::kSentencePiece ? "llama" : "gpt2"; }
  std::string_view pre_name() const { return pre_name_; }
  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  const std::string& token_text(TokenId id) const { return tokens_[static_cast<size_t>(id)]; }
  TokenType token_type(TokenId id) const { return types_[static_cast<size_t>(id)]; }
  TokenId TextToToken(std::string_view text) const;  // kNoToken when absent

  TokenId bos() const { return bos_; }
  TokenId eos() const { return eos_; }
  TokenId unk() const { return unk_; }
  TokenId pad() const { return pad_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  // End of generation: EOS, EOT, EOM and the control tokens that end a turn in known chat formats.
  bool IsEndOfGeneration(TokenId id) const;
  std::span<const TokenId> end_of_generation() const { return eog_; }

 private:
  Tokenizer() = default;
  Status Load(const GgufFile& gguf);
  // Raw text (token == kNoToken) or one special token.
  struct Fragment {
    std::string_view text;
    TokenId token;
  };
  // Splits text into raw-text pieces and special tokens (user-defined ones always; control ones with
  // parse_special), appending to `out`.
  void SplitSpecials(std::string_view text, bool parse_special, std::vector<Fragment>* out) const;
  // Encodes fragments in order (SentencePiece: a space prefix before the first text and after a special).
  void EncodeFragments(std::span<const Fragment> fragments, std::vector<TokenId>* out) const;
  void EncodeSpm(std::string_view text, std::vector<TokenId>* out) const;
  void EncodeSpmSegment(std::string_view text, std::vector<TokenId>* out) const;
  void EncodeBpe(std::string_view text, std::vector<TokenId>* out) const;
  void EncodeBpeWord(std::string_view raw_word, std::vector<TokenId>* out) const;
  // The <0xXX> token of a byte, else the token spelled by the byte alone, else unk() (kNoToken if none).
  TokenId ByteToken(uint8_t byte) const;
  static uint64_t MergeKey(TokenId left, TokenId right) {
    return static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32 | static_cast<uint32_t>(right);
  }

  TokenizerKind kind_ = TokenizerKind::kSentencePiece;
  PreTokenizer pre_ = PreTokenizer::kGpt2;
  std::string pre_name_;
  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<TokenType> types_;
  std::unordered_map<std::string_view, TokenId> token_ids_;  // views into tokens_
  // BPE merge ranks by (left id << 32 | right id); merges naming a text that is not a token are kept by text.
  std::unordered_map<uint64_t, int32_t> merge_ranks_;
  std::unordered_map<std::string, int32_t> merge_text_ranks_;  // "left right" -> rank
  std::array<TokenId, 256> byte_char_tokens_{};  // BPE: the token of each byte's byte-alphabet character
  std::vector<TokenId> specials_;  // control, user-defined and unknown tokens, longest text first
  std::vector<TokenId> eog_;
  TokenId bos_ = kNoToken, eos_ = kNoToken, unk_ = kNoToken, pad_ = kNoToken;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false;
  // SentencePiece tokens that hold U+2581 after another character (see EncodeSpm); past kMaxCrossWordTokens
  // of them, the whole text is merged at once.
  static constexpr size_t kMaxCrossWordTokens = 64;
  std::vector<TokenId> spm_cross_word_tokens_;
};

}  // namespace tq::engine
