// Tokenizers against llama.cpp's test vectors (tests/data/tokenizer: .inp strings separated by lines
// "__ggml_vocab_test__", .out expected ids one line per string, encoded without BOS and without parsing
// special tokens), plus the stories260K and SmolLM2 vocabularies.
#include "engine/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/pretokenize.h"
#include "tests/unit/engine/gguf_builder.h"
#include "tests/unit/engine/test_paths.h"

namespace tq::engine {
namespace {

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Case {
  std::string text;
  std::vector<TokenId> ids;
};

std::vector<Case> LoadCases(const std::string& vocab) {
  const std::string inp = ReadText(vocab + ".inp");
  const std::string outp = ReadText(vocab + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<Case> cases;
  for (size_t start = 0; start < inp.size();) {
    size_t end = inp.find(sep, start);
    if (end == std::string::npos) end = inp.size();
    cases.push_back({inp.substr(start, end - start), {}});
    start = end + sep.size();
  }
  std::istringstream lines(outp);
  std::string line;
  for (Case& c : cases) {
    std::getline(lines, line);
    std::istringstream ids(line);
    TokenId id;
    while (ids >> id) c.ids.push_back(id);
  }
  return cases;
}

std::string Show(const std::vector<TokenId>& ids) {
  std::string s;
  for (TokenId id : ids) s += std::to_string(id) + " ";
  return s;
}

void CheckVectors(const std::string& vocab, bool round_trip_exact) {
  TQ_SKIP_IF_MISSING(vocab);
  auto gguf = GgufFile::Open(vocab);
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  auto tok = Tokenizer::FromGguf(**gguf);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const std::vector<Case> cases = LoadCases(vocab);
  ASSERT_GT(cases.size(), 40u);
  int failures = 0;
  for (const Case& c : cases) {
    const std::vector<TokenId> ids = (*tok)->Encode(c.text, {.add_special = false, .parse_special = false});
    EXPECT_EQ(Show(ids), Show(c.ids)) << "text: '" << c.text << "'";
    failures += ids != c.ids;
    if (round_trip_exact) {
      EXPECT_EQ((*tok)->Decode(ids), c.text);
    }
  }
  EXPECT_EQ(failures, 0) << "of " << cases.size();
}

TEST(TokenizerTest, LlamaSpmVectors) {
  CheckVectors(testing::DataPath("tokenizer/ggml-vocab-llama-spm.gguf"), true);
}

TEST(TokenizerTest, Gpt2Vectors) {
  CheckVectors(testing::DataPath("tokenizer/ggml-vocab-gpt-2.gguf"), true);
}

TEST(TokenizerTest, SpmSpecialsAndBytes) {
  const std::string vocab = testing::DataPath("tokenizer/ggml-vocab-llama-spm.gguf");
  TQ_SKIP_IF_MISSING(vocab);
  auto gguf = GgufFile::Open(vocab);
  ASSERT_TRUE(gguf.ok());
  auto tok = Tokenizer::FromGguf(**gguf);
  ASSERT_TRUE(tok.ok());
  const Tokenizer& t = **tok;
  EXPECT_EQ(t.kind(), TokenizerKind::kSentencePiece);
  EXPECT_EQ(t.bos(), 1);
  EXPECT_EQ(t.eos(), 2);
  EXPECT_TRUE(t.add_bos());
  EXPECT_TRUE(t.IsEndOfGeneration(2));
  // BOS from metadata; "</s>" in text is only a token when special tokens are parsed.
  EXPECT_EQ(t.Encode("Hello world"), (std::vector<TokenId>{1, 15043, 3186}));
  std::vector<TokenId> parsed = t.Encode("Hi</s>", {.add_special = false, .parse_special = true});
  EXPECT_EQ(parsed.back(), 2);
  std::vector<TokenId> raw = t.Encode("Hi</s>", {.add_special = false, .parse_special = false});
  EXPECT_NE(raw.back(), 2);
  // Byte fallback: a character outside the vocabulary comes back through <0xXX> tokens.
  const std::string rare = "\xF0\x9F\xA6\x99";  // U+1F999
  std::vector<TokenId> ids = t.Encode(rare, {.add_special = false});
  EXPECT_GE(ids.size(), 4u);
  EXPECT_EQ(t.Decode(ids), rare);
  EXPECT_EQ(t.Decode(t.Encode("Hello world"), {.remove_special = true}), "Hello world");
  EXPECT_EQ(t.TokenToPiece(1, /*unparse_special=*/true), "<s>");
  EXPECT_EQ(t.TokenToPiece(1), "");
  EXPECT_EQ(t.TokenToPiece(0), "\xE2\x96\x85");  // <unk>
  EXPECT_EQ(t.TokenToPiece(0, /*unparse_special=*/true), "<unk>");
}

TEST(TokenizerTest, Stories260K) {
  TQ_SKIP_IF_MISSING(testing::Stories260KPath());
  auto gguf = GgufFile::Open(testing::Stories260KPath());
  ASSERT_TRUE(gguf.ok());
  auto tok = Tokenizer::FromGguf(**gguf);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const Tokenizer& t = **tok;
  EXPECT_EQ(t.vocab_size(), 512);
  EXPECT_EQ(t.bos(), 1);
  EXPECT_EQ(t.eos(), 2);
  const std::string text =
      "Once upon a time, there was a little girl named Lily. \xC3\xA9t\xC3\xA9 \xE4\xB8\xAD!";
  std::vector<TokenId> ids = t.Encode(text);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 1);
  for (TokenId id : ids) EXPECT_LT(id, 512);
  EXPECT_EQ(t.Decode(ids, {.remove_special = true}), text);  // byte fallback covers what 512 tokens cannot
}

TEST(TokenizerTest, SmolLm2) {
  TQ_SKIP_IF_MISSING(testing::SmolLm2Path());
  auto gguf = GgufFile::Open(testing::SmolLm2Path());
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  auto tok = Tokenizer::FromGguf(**gguf);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const Tokenizer& t = **tok;
  EXPECT_EQ(t.kind(), TokenizerKind::kByteLevelBpe);
  EXPECT_EQ(t.pre_name(), "smollm");
  EXPECT_EQ(t.vocab_size(), 49152);
  EXPECT_FALSE(t.add_bos());
  EXPECT_TRUE(t.IsEndOfGeneration(2));  // <|im_end|>
  // Chat markers are single tokens when special tokens are parsed.
  std::vector<TokenId> chat = t.Encode("<|im_start|>user\nHi<|im_end|>\n", {.parse_special = true});
  ASSERT_GE(chat.size(), 4u);
  EXPECT_EQ(chat.front(), 1);
  EXPECT_EQ(std::count(chat.begin(), chat.end(), 2), 1);
  EXPECT_EQ(t.Decode(chat, {.unparse_special = true}), "<|im_start|>user\nHi<|im_end|>\n");
  // smollm splits digits one by one.
  std::vector<TokenId> digits = t.Encode("12345", {});
  EXPECT_EQ(digits.size(), 5u);
  const std::string text =
      "Hello, y'all! How are you \xF0\x9F\x98\x81 ?\xE6\x88\x91\xE6\x83\xB3 1314151  x\n\n";
  EXPECT_EQ(t.Decode(t.Encode(text)), text);
}

// SmolLM2's ids for llama.cpp's test strings, from Hugging Face tokenizers
// (testdata/make_tokenizer_golden.py).
TEST(TokenizerTest, SmolLm2MatchesHfTokenizers) {
  const std::string inp = testing::DataPath("tokenizer/ggml-vocab-gpt-2.gguf");
  TQ_SKIP_IF_MISSING(inp);
  TQ_SKIP_IF_MISSING(testing::SmolLm2Path());
  std::vector<Case> cases = LoadCases(inp);
  std::istringstream lines(ReadText("tests/unit/engine/testdata/smollm2.out"));
  auto gguf = GgufFile::Open(testing::SmolLm2Path());
  ASSERT_TRUE(gguf.ok());
  auto tok = Tokenizer::FromGguf(**gguf);
  ASSERT_TRUE(tok.ok());
  std::string line;
  for (const Case& c : cases) {
    ASSERT_TRUE(std::getline(lines, line));
    EXPECT_EQ(Show((*tok)->Encode(c.text, {.add_special = false})) + "|", line + (line.empty() ? "|" : " |"))
        << "text: '" << c.text << "'";
  }
}

uint64_t Fnv1a(const std::vector<TokenId>& ids) {
  uint64_t h = 1469598103934665603ull;
  for (TokenId id : ids) {
    h ^= static_cast<uint64_t>(id);
    h *= 1099511628211ull;
  }
  return h;
}

// The whole WikiText-2 test file (1.3 MB): count and hash of the ids against Hugging Face tokenizers for the
// byte-level BPE vocabularies (testdata/wiki_token_hashes.py) and against the sentencepiece package for the
// SentencePiece ones (testdata/spm_reference.py), and an exact round trip.
TEST(TokenizerTest, WikiTextMatchesReferenceTokenizers) {
  const std::string wiki = testing::DataPath("wikitext-2-raw/wiki.test.raw");
  TQ_SKIP_IF_MISSING(wiki);
  const std::string text = ReadText(wiki);
  struct Expect {
    std::string path;
    size_t count;
    uint64_t hash;
  };
  std::vector<Expect> expects = {
      {testing::DataPath("tokenizer/ggml-vocab-gpt-2.gguf"), 286221, 0x53d6d0d0c08b48caull},
      {testing::DataPath("tokenizer/ggml-vocab-llama-spm.gguf"), 335687, 0x7112fd665d6e0bb1ull},
      {testing::Stories260KPath(), 809289, 0x3d0ba01e58f6404bull},
  };
  if (testing::Exists(testing::SmolLm2Path())) {
    expects.push_back({testing::SmolLm2Path(), 303415, 0xd16e26595263485eull});
  }
  if (testing::Exists(testing::Gemma3Path())) {
    expects.push_back({testing::Gemma3Path(), 295215, 0xf98b55ec2550ec8full});
  }
  for (const Expect& e : expects) {
    auto gguf = GgufFile::Open(e.path);
    ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
    auto tok = Tokenizer::FromGguf(**gguf);
    ASSERT_TRUE(tok.ok());
    const std::vector<TokenId> ids = (*tok)->Encode(text, {.add_special = false});
    EXPECT_EQ(ids.size(), e.count) << e.path;
    EXPECT_EQ(Fnv1a(ids), e.hash) << e.path;
    EXPECT_TRUE((*tok)->Decode(ids) == text) << e.path;
  }
}

// Gemma 3: SentencePiece without a space prefix, with user-defined whitespace tokens ("\n\n", "  ") split out
// of the raw text first; ids of llama.cpp's test strings from the sentencepiece package
// (testdata/spm_reference.py).
TEST(TokenizerTest, Gemma3MatchesSentencePiece) {
  const std::string inp = testing::DataPath("tokenizer/ggml-vocab-gpt-2.gguf");
  TQ_SKIP_IF_MISSING(inp);
  TQ_SKIP_IF_MISSING(testing::Gemma3Path());
  auto gguf = GgufFile::Open(testing::Gemma3Path());
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  auto tok = Tokenizer::FromGguf(**gguf);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_FALSE((*tok)->add_space_prefix());
  EXPECT_EQ((*tok)->bos(), 2);
  std::istringstream lines(ReadText("tests/unit/engine/testdata/gemma3.out"));
  std::string line;
  for (const Case& c : LoadCases(inp)) {
    ASSERT_TRUE(std::getline(lines, line));
    const std::vector<TokenId> ids = (*tok)->Encode(c.text, {.add_special = false});
    EXPECT_EQ(Show(ids) + "|", line + (line.empty() ? "|" : " |")) << "text: '" << c.text << "'";
    EXPECT_EQ((*tok)->Decode(ids), c.text);
  }
}

// Llama 3 and Qwen2 pre-tokenizer splits against the regexes run by Hugging Face tokenizers.
TEST(PreTokenizerTest, Llama3AndQwen2MatchRegex) {
  const std::string inp = testing::DataPath("tokenizer/ggml-vocab-gpt-2.gguf");
  TQ_SKIP_IF_MISSING(inp);
  const std::vector<Case> cases = LoadCases(inp);
  for (auto [pre, file] : {std::pair{PreTokenizer::kLlama3, "pre_llama3.out"},
                           std::pair{PreTokenizer::kQwen2, "pre_qwen2.out"}}) {
    std::istringstream lines(ReadText(std::string("tests/unit/engine/testdata/") + file));
    std::string line;
    for (const Case& c : cases) {
      ASSERT_TRUE(std::getline(lines, line));
      std::string lengths;
      for (const std::string& w : PreTokenize(pre, c.text))
        lengths += (lengths.empty() ? "" : " ") + std::to_string(w.size());
      EXPECT_EQ(lengths, line) << file << " text: '" << c.text << "'";
    }
  }
}

TEST(PreTokenizerTest, Gpt2Rules) {
  const auto split = [](std::string_view s) { return PreTokenize(PreTokenizer::kGpt2, s); };
  EXPECT_EQ(split("Hello world"), (std::vector<std::string>{"Hello", " world"}));
  EXPECT_EQ(split("it's  ok\n"), (std::vector<std::string>{"it", "'s", " ", " ok", "\n"}));
  EXPECT_EQ(split("a\tb"), (std::vector<std::string>{"a", "\t", "b"}));
  EXPECT_EQ(split("x 123!!"), (std::vector<std::string>{"x", " 123", "!!"}));
  EXPECT_EQ(PreTokenize(PreTokenizer::kSmolLm, "ab 12"), (std::vector<std::string>{"ab", " ", "1", "2"}));
  EXPECT_EQ(PreTokenize(PreTokenizer::kLlama3, "Hello 12345 world\n\n x"),
            (std::vector<std::string>{"Hello", " ", "123", "45", " world", "\n\n", " x"}));
}

TEST(ByteLevelTest, Alphabet) {
  EXPECT_EQ(ByteToUnicode(' '), 0x120u);
  EXPECT_EQ(ByteToUnicode('\n'), 0x10Au);
  EXPECT_EQ(ByteToUnicode('A'), static_cast<uint32_t>('A'));
  for (int b = 0; b < 256; ++b) EXPECT_EQ(UnicodeToByte(ByteToUnicode(static_cast<uint8_t>(b))), b);
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(ByteLevelToBytes(BytesToByteLevel(all)), all);
}

// A tiny byte-level vocabulary where merges reach "a"+"bc" but never "abc", which is a token: Llama 3
// (llama-bpe) takes a word that is a token as a whole, GPT-2 follows the merges.
TEST(TokenizerTest, Llama3IgnoresMergesForWholeWordTokens) {
  for (const char* pre : {"llama-bpe", "gpt-2"}) {
    testing::GgufBuilder b;
    b.AddString("tokenizer.ggml.model", "gpt2").AddString("tokenizer.ggml.pre", pre);
    b.AddStringArray("tokenizer.ggml.tokens", {"a", "b", "c", "bc", "abc"});
    b.AddStringArray("tokenizer.ggml.merges", {"b c"});
    b.AddU32("tokenizer.ggml.bos_token_id", 0);
    std::vector<uint8_t> bytes = b.Build();
    auto gguf = GgufFile::Parse(bytes);
    ASSERT_TRUE(gguf.ok());
    auto tok = Tokenizer::FromGguf(**gguf);
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    const std::vector<TokenId> ids = (*tok)->Encode("abc", {.add_special = false});
    if (std::string(pre) == "llama-bpe") {
      EXPECT_EQ(ids, (std::vector<TokenId>{4}));
      EXPECT_TRUE((*tok)->add_bos());  // Llama 3 vocabularies add BOS unless the metadata says otherwise
    } else {
      EXPECT_EQ(ids, (std::vector<TokenId>{0, 3}));
      EXPECT_FALSE((*tok)->add_bos());
    }
  }
}

TEST(TokenizerTest, MalformedByteTokenDecodesAsText) {
  testing::GgufBuilder b;
  b.AddString("tokenizer.ggml.model", "llama");
  b.AddStringArray("tokenizer.ggml.tokens", {"<unk>", "<0xZZ>", "<0x41>", "\xE2\x96\x81x"});
  b.AddI32Array("tokenizer.ggml.token_type", {2, 6, 6, 1});
  b.AddU32("tokenizer.ggml.unknown_token_id", 0);
  std::vector<uint8_t> bytes = b.Build();
  auto gguf = GgufFile::Parse(bytes);
  ASSERT_TRUE(gguf.ok());
  auto tok = Tokenizer::FromGguf(**gguf);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ((*tok)->TokenToPiece(1), "<0xZZ>");
  EXPECT_EQ((*tok)->TokenToPiece(2), "A");
  EXPECT_EQ((*tok)->Encode("xA", {.add_special = false}), (std::vector<TokenId>{3, 2}));
  // "\xE2\x96\x81B" has no token, nor do its four bytes: the unknown token for each byte.
  EXPECT_EQ((*tok)->Encode("B", {.add_special = false}), (std::vector<TokenId>{0, 0, 0, 0}));
}

TEST(TokenizerTest, BadMetadataNamesTheKey) {
  testing::GgufBuilder b;
  b.AddString("tokenizer.ggml.model", "gpt2");
  b.AddStringArray("tokenizer.ggml.tokens", {"a", "b"});
  b.AddStringArray("tokenizer.ggml.merges", {"a b"});
  b.AddString("tokenizer.ggml.pre", "no-such-pre");
  std::vector<uint8_t> bytes = b.Build();
  auto gguf = GgufFile::Parse(bytes);
  ASSERT_TRUE(gguf.ok());
  auto tok = Tokenizer::FromGguf(**gguf);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("tokenizer.ggml.pre"), std::string::npos) << tok.status().ToString();

  testing::GgufBuilder c;
  c.AddString("tokenizer.ggml.model", "llama");
  c.AddStringArray("tokenizer.ggml.tokens", {"a", "b"});
  c.AddF32Array("tokenizer.ggml.scores", {0.0f});
  std::vector<uint8_t> bytes2 = c.Build();
  auto gguf2 = GgufFile::Parse(bytes2);
  ASSERT_TRUE(gguf2.ok());
  auto tok2 = Tokenizer::FromGguf(**gguf2);
  ASSERT_FALSE(tok2.ok());
  EXPECT_NE(tok2.status().message().find("tokenizer.ggml.scores"), std::string::npos);

  testing::GgufBuilder d;
  d.AddString("tokenizer.ggml.model", "bert");
  std::vector<uint8_t> bytes3 = d.Build();
  auto tok3 = Tokenizer::FromGguf(**GgufFile::Parse(bytes3));
  EXPECT_EQ(tok3.status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace tq::engine
