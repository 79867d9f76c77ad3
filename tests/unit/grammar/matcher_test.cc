// Constrained decoding on a real vocabulary (stories260K's SentencePiece tokenizer, shipped in tests/data): random
// walks through the mask always produce text in the language, the mask never offers control tokens and offers
// end-of-generation only where the output is complete, and the engine's generation obeys a constraint end to end.
#include "engine/grammar/grammar.h"

#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <mutex>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/utf8.h"
#include "engine/model/gguf.h"
#include "engine/runner/engine.h"
#include "tests/unit/engine/test_paths.h"

namespace tq::engine {
namespace {

class MatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto gguf = GgufFile::Open(testing::Stories260KPath());
    ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
    auto tok = Tokenizer::FromGguf(**gguf);
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    tokenizer_ = std::move(tok).value();
    auto c = ConstraintCompiler::Create(*tokenizer_, tokenizer_->vocab_size());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    compiler_ = std::move(c).value();
  }

  std::shared_ptr<const CompiledConstraint> Compile(ConstraintKind kind, const std::string& source) {
    auto c = compiler_->Compile({.kind = kind, .source = source, .strict = true});
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  // Picks uniformly among the tokens the mask allows until the grammar is complete; returns the text, or "<stuck>"
  // when the walk did not end in `max_steps`.
  std::string RandomWalk(const std::shared_ptr<const CompiledConstraint>& c, uint64_t seed, int max_steps = 400) {
    TokenMatcher m(c, tokenizer_->vocab_size());
    std::mt19937_64 rng(seed);
    std::string text;
    std::vector<float> logits(static_cast<size_t>(tokenizer_->vocab_size()));
    for (int step = 0; step < max_steps; ++step) {
      std::fill(logits.begin(), logits.end(), 0.0f);
      m.Mask(logits);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < static_cast<int32_t>(logits.size()); ++t) {
        if (std::isfinite(logits[t])) allowed.push_back(t);
      }
      EXPECT_FALSE(allowed.empty());
      if (allowed.empty()) return "<empty mask>";
      const int32_t t = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      EXPECT_TRUE(m.Accept(t));
      if (m.terminated()) {
        EXPECT_TRUE(tokenizer_->IsEndOfGeneration(t));
        return text;
      }
      text += tokenizer_->TokenToPiece(t);
    }
    return "<stuck>";
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ConstraintCompiler> compiler_;
};

TEST_F(MatcherTest, RandomWalksThroughARegexMatchIt) {
  const std::string re = "(cat|dog)s? [0-9]{1,3}!";
  auto c = Compile(ConstraintKind::kRegex, re);
  ASSERT_NE(c, nullptr);
  for (uint64_t seed = 0; seed < 30; ++seed) {
    const std::string text = RandomWalk(c, seed);
    EXPECT_TRUE(std::regex_match(text, std::regex(re))) << seed << ": '" << text << "'";
  }
}

TEST_F(MatcherTest, RandomWalksThroughASchemaValidate) {
  auto c = Compile(ConstraintKind::kJsonSchema, R"({"type": "object", "properties": {
      "color": {"enum": ["red", "blue"]}, "n": {"type": "integer", "minimum": 1, "maximum": 9},
      "ok": {"type": "boolean"}}, "required": ["color", "n", "ok"], "additionalProperties": false})");
  ASSERT_NE(c, nullptr);
  for (uint64_t seed = 0; seed < 30; ++seed) {
    const std::string text = RandomWalk(c, seed);
    const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(j.is_discarded()) << seed << ": '" << text << "'";
    EXPECT_TRUE(j["color"] == "red" || j["color"] == "blue") << text;
    EXPECT_TRUE(j["n"].is_number_integer() && j["n"] >= 1 && j["n"] <= 9) << text;
    EXPECT_TRUE(j["ok"].is_boolean()) << text;
    EXPECT_EQ(j.size(), 3u) << text;
  }
}

TEST_F(MatcherTest, JsonObjectGivesAnObject) {
  auto c = Compile(ConstraintKind::kJsonObject, "");
  ASSERT_NE(c, nullptr);
  for (uint64_t seed = 0; seed < 10; ++seed) {
    const std::string text = RandomWalk(c, seed, 4000);
    if (text == "<stuck>") continue;  // a uniform walk may nest deeply; what ends must be an object
    // xgrammar's string rule admits a few byte sequences that are not well-formed UTF-8 (surrogates, overlong
    // forms) when a walk picks byte tokens at random; the front ends send text through SanitizeUtf8, as here.
    try {
      EXPECT_TRUE(nlohmann::json::parse(SanitizeUtf8(text)).is_object()) << seed << ": '" << text << "'";
    } catch (const std::exception& e) {
      ADD_FAILURE() << seed << ": " << e.what();
    }
  }
}

TEST_F(MatcherTest, ControlTokensNeverAndEndOnlyWhenComplete) {
  auto c = Compile(ConstraintKind::kEbnf, R"(root ::= "a" "b"?)");
  ASSERT_NE(c, nullptr);
  TokenMatcher m(c, tokenizer_->vocab_size());
  std::vector<float> logits(static_cast<size_t>(tokenizer_->vocab_size()), 1.0f);
  m.Mask(logits);
  for (int32_t t = 0; t < tokenizer_->vocab_size(); ++t) {
    if (tokenizer_->token_type(t) == TokenType::kControl) {
      EXPECT_TRUE(std::isinf(logits[t])) << t;
    }
  }
  EXPECT_TRUE(std::isinf(logits[tokenizer_->eos()]));  // "" is not in the language
  const int32_t a = tokenizer_->TextToToken("a");
  const int32_t z = tokenizer_->TextToToken("z");
  ASSERT_NE(a, kNoToken);
  ASSERT_NE(z, kNoToken);
  EXPECT_FALSE(m.Accept(z));  // refused, state unchanged
  ASSERT_TRUE(m.Accept(a)) << tokenizer_->TokenToPiece(a);
  std::fill(logits.begin(), logits.end(), 1.0f);
  m.Mask(logits);
  EXPECT_FALSE(std::isinf(logits[tokenizer_->eos()]));  // "a" is complete
  EXPECT_FALSE(m.terminated());
  ASSERT_TRUE(m.Accept(tokenizer_->eos()));
  EXPECT_TRUE(m.terminated());
}

TEST_F(MatcherTest, BadSpecsAreInvalidArgumentNamingTheProblem) {
  struct Case {
    ConstraintKind kind;
    const char* source;
    const char* needle;
  };
  const Case cases[] = {
      {ConstraintKind::kJsonSchema, "{", "not valid JSON"},
      {ConstraintKind::kJsonSchema, R"({"type": "object", "not": {}})", "'not'"},
      {ConstraintKind::kRegex, "[a-", "regex"},
      {ConstraintKind::kRegex, "", "empty"},
      {ConstraintKind::kEbnf, "root ::= ", "grammar"},
      {ConstraintKind::kEbnf, R"(start ::= "a")", "grammar"},
  };
  for (const Case& c : cases) {
    auto r = compiler_->Compile({.kind = c.kind, .source = c.source});
    ASSERT_FALSE(r.ok()) << c.source;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.source;
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << c.source << ": " << r.status().message();
  }
}

// The engine end to end on the real model: greedy and sampled outputs match, and the output ends with the
// grammar (kStop) even with ignore_eos.
TEST_F(MatcherTest, EngineOutputObeysTheConstraint) {
  EngineOptions o;
  o.model_path = testing::Stories260KPath();
  o.threads = 1;
  o.ctx_size = 256;
  auto e = Engine::Create(o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const std::string re = "Once upon a (time|day), [a-z]{1,8} (was|had) [a-z ]{1,20}\\.";
  auto c = (*e)->CompileConstraint({.kind = ConstraintKind::kRegex, .source = re});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (int i = 0; i < 4; ++i) {
    GenerateRequest r;
    r.id = "c" + std::to_string(i);
    r.prompt = (*e)->Tokenize("Lily", {});
    r.max_tokens = 200;
    r.sampling.temperature = i == 0 ? 0.0f : 1.0f;
    r.sampling.seed = static_cast<uint64_t>(i);
    r.sampling.has_seed = true;
    r.ignore_eos = i == 3;
    r.constraint = *c;
    std::mutex mu;
    std::condition_variable cv;
    std::string text;
    GenerateEvent last;
    bool done = false;
    ASSERT_TRUE((*e)->Submit(std::move(r), [&](GenerateEvent&& ev) {
                      std::lock_guard<std::mutex> lock(mu);
                      text += ev.text;
                      if (ev.final) {
                        last = std::move(ev);
                        done = true;
                        cv.notify_all();
                      }
                    }).ok());
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    EXPECT_EQ(last.finish_reason, FinishReason::kStop) << i << ": " << last.error.ToString() << " '" << text << "'";
    EXPECT_TRUE(std::regex_match(text, std::regex(re))) << i << ": '" << text << "'";
  }
}

}  // namespace
}  // namespace tq::engine
