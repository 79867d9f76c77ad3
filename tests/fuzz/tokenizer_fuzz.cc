// libFuzzer target: both tokenizer kinds (the GPT-2 byte-level BPE and LLaMA SentencePiece vocabularies of
// tests/data/tokenizer; run from the repository root) on arbitrary text. Checks: ids in range, and for
// valid UTF-8 input encoded without special-token parsing, Decode(Encode(text)) == text (for SentencePiece,
// unless the text holds U+2581, its space mark). Any failure aborts.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace {

struct Loaded {
  std::unique_ptr<tq::engine::GgufFile> gguf;
  std::unique_ptr<tq::engine::Tokenizer> tokenizer;
};

std::vector<Loaded>* g_tokenizers = nullptr;

// Strict UTF-8: shortest form, no surrogates, at most U+10FFFF.
bool ValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
    const uint8_t c = b(i);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) {
      if ((b(i + k) & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b(i + k) & 0x3F);
    }
    const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_tokenizers = new std::vector<Loaded>();
  for (const char* path : {"tests/data/tokenizer/ggml-vocab-gpt-2.gguf",
                           "tests/data/tokenizer/ggml-vocab-llama-spm.gguf"}) {
    auto gguf = tq::engine::GgufFile::Open(path);
    if (!gguf.ok()) {
      std::fprintf(stderr, "tokenizer_fuzz: %s (run from the repository root: tests/data)\n",
                   gguf.status().ToString().c_str());
      std::exit(1);
    }
    auto tok = tq::engine::Tokenizer::FromGguf(**gguf);
    if (!tok.ok()) std::abort();
    g_tokenizers->push_back({std::move(*gguf), std::move(*tok)});
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool valid = ValidUtf8(text);
  for (const Loaded& l : *g_tokenizers) {
    const tq::engine::Tokenizer& t = *l.tokenizer;
    for (bool parse_special : {false, true}) {
      const std::vector<tq::engine::TokenId> ids =
          t.Encode(text, {.add_special = true, .parse_special = parse_special});
      for (tq::engine::TokenId id : ids) {
        if (id < 0 || id >= t.vocab_size()) std::abort();
      }
      const std::string back = t.Decode(ids, {.remove_special = true, .unparse_special = parse_special});
      // SentencePiece spells ' ' as U+2581, so a U+2581 in the input comes back as ' ' (as in sentencepiece).
      const bool spm_space = t.kind() == tq::engine::TokenizerKind::kSentencePiece &&
                             text.find("\xE2\x96\x81") != std::string_view::npos;
      if (valid && !parse_special && !spm_space && back != text) {
        std::fprintf(stderr, "round trip differs for the %s tokenizer\n",
                     std::string(t.model_name()).c_str());
        std::abort();
      }
    }
  }
  return 0;
}
