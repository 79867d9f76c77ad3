// Function calling per chat format (engine/runner/tool_calls.h): tools and calls render into the prompt, calls
// rendered in a history parse back, every tool_choice's constraint compiles, and random walks through each
// constraint (over stories260K's vocabulary) give text that parses into calls of the right functions with
// arguments that are JSON objects, or, for auto, free text.
#include "engine/runner/tool_calls.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/utf8.h"
#include "engine/grammar/grammar.h"
#include "engine/model/gguf.h"
#include "tests/unit/engine/gguf_builder.h"
#include "tests/unit/engine/test_paths.h"

namespace tq::engine {
namespace {

const std::vector<ToolSpec> kTools = {
    {"get_weather", "Weather in a city",
     R"({"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}, "days": {"type": "integer",
         "minimum": 1, "maximum": 7}}, "required": ["city", "days"], "additionalProperties": false})"},
    {"get_time", "", R"({"type": "object", "properties": {"utc": {"type": "boolean"}}, "required": ["utc"],
         "additionalProperties": false})"},
};

constexpr ChatFormat kFormats[] = {ChatFormat::kChatMl, ChatFormat::kLlama3, ChatFormat::kMistral};

TEST(ToolCallsTest, RenderedCallsParseBack) {
  const std::vector<ToolCall> calls = {{"", "get_weather", R"({"city":"Paris","days":2})"},
                                       {"", "get_time", R"({"utc":true})"}};
  for (ChatFormat f : kFormats) {
    const std::string text = RenderToolCalls(f, calls);
    const ParsedToolCalls p = ParseToolCalls(f, "Let me check.\n" + text, kTools);
    ASSERT_EQ(p.calls.size(), 2u) << ChatFormatName(f) << ": " << text;
    EXPECT_EQ(p.calls[0].name, "get_weather");
    EXPECT_EQ(p.calls[0].arguments, R"({"city":"Paris","days":2})");
    EXPECT_EQ(p.calls[1].arguments, R"({"utc":true})");
    EXPECT_EQ(p.content, "Let me check.") << ChatFormatName(f);
  }
}

TEST(ToolCallsTest, UnknownFunctionsAndBadJsonStayContent) {
  EXPECT_TRUE(ParseToolCalls(ChatFormat::kChatMl, "<tool_call>\n{\"name\": \"rm\", \"arguments\": {}}\n</tool_call>",
                             kTools).calls.empty());
  const ParsedToolCalls bad = ParseToolCalls(ChatFormat::kChatMl, "a <tool_call>{oops</tool_call> b", kTools);
  EXPECT_TRUE(bad.calls.empty());
  EXPECT_EQ(bad.content, "a <tool_call>{oops</tool_call> b");
  EXPECT_TRUE(ParseToolCalls(ChatFormat::kLlama3, R"({"name": "get_time", "parameters": 3})", kTools).calls.empty());
  EXPECT_TRUE(ParseToolCalls(ChatFormat::kMistral, "[TOOL_CALLS] [{\"name\": \"get_time\"", kTools).calls.empty());
  const ParsedToolCalls prose = ParseToolCalls(ChatFormat::kLlama3, "use {braces} freely", kTools);
  EXPECT_TRUE(prose.calls.empty());
  EXPECT_EQ(prose.content, "use {braces} freely");
}

TEST(ToolCallsTest, HoldbackStopsAtATriggerOrItsStart) {
  EXPECT_EQ(ToolCallHoldback(ChatFormat::kChatMl, "Sure. <tool_call>\n{"), 6u);
  EXPECT_EQ(ToolCallHoldback(ChatFormat::kChatMl, "Sure. <tool_"), 6u);
  EXPECT_EQ(ToolCallHoldback(ChatFormat::kChatMl, "a < b"), 5u);
  EXPECT_EQ(ToolCallHoldback(ChatFormat::kMistral, "[TOOL"), 0u);
  EXPECT_EQ(ToolCallHoldback(ChatFormat::kLlama3, "{\"na"), 0u);
}

TEST(ToolCallsTest, PromptsCarryToolsCallsAndResults) {
  const std::vector<ChatMessage> history = {
      {"user", "Weather in Oslo?"},
      {"assistant", "", {{"call_1", "get_weather", R"({"city":"Oslo","days":1})"}}},
      {"tool", R"({"temp": -3})", {}, "call_1"},
  };
  for (ChatFormat f : kFormats) {
    auto text = RenderChat(ChatTemplate{f, ""}, history, kTools);
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    EXPECT_NE(text->find("get_time"), std::string::npos) << *text;                       // the tools
    EXPECT_NE(text->find(R"({"city":"Oslo","days":1})"), std::string::npos) << *text;    // the call
    EXPECT_NE(text->find(R"({"temp": -3})"), std::string::npos) << *text;                // the result
    EXPECT_EQ(ParseToolCalls(f, *text, kTools).calls.size(), 1u) << ChatFormatName(f) << ": " << *text;
  }
  auto none = RenderChat(ChatTemplate{ChatFormat::kChatMl, ""}, {{"user", "hi"}}, {});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->find("<tools>"), std::string::npos);
}

TEST(ToolCallsTest, CheckToolsRefusesBadSpecs) {
  EXPECT_TRUE(CheckTools(kTools, {}, 32).ok());
  EXPECT_FALSE(CheckTools({}, {}, 32).ok());
  EXPECT_FALSE(CheckTools({{"a b", "", ""}}, {}, 32).ok());
  EXPECT_FALSE(CheckTools({{"f", "", ""}, {"f", "", ""}}, {}, 32).ok());
  EXPECT_FALSE(CheckTools({{"f", "", R"({"type": "object", "if": {}})"}}, {}, 32).ok());
  EXPECT_FALSE(CheckTools({{"f", "", "[1]"}}, {}, 32).ok());
  const Status missing = CheckTools(kTools, {ToolChoiceMode::kNamed, "nope"}, 32);
  EXPECT_NE(missing.message().find("'nope'"), std::string::npos) << missing.message();
}

class ToolWalkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto gguf = GgufFile::Open(testing::Stories260KPath());
    ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
    auto tok = Tokenizer::FromGguf(**gguf);
    ASSERT_TRUE(tok.ok());
    tokenizer_ = std::move(tok).value();
    compiler_ = ConstraintCompiler::Create(*tokenizer_, tokenizer_->vocab_size()).value();
  }

  // A uniform random walk through the constraint's mask, preferring tokens that close structures when the walk
  // is long (so free text and strings end); "" when it did not end.
  std::string Walk(const std::shared_ptr<const CompiledConstraint>& c, uint64_t seed) {
    TokenMatcher m(c, tokenizer_->vocab_size());
    std::mt19937_64 rng(seed);
    std::string text;
    std::vector<float> logits(static_cast<size_t>(tokenizer_->vocab_size()));
    for (int step = 0; step < 3000; ++step) {
      std::fill(logits.begin(), logits.end(), 0.0f);
      m.Mask(logits);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < static_cast<int32_t>(logits.size()); ++t) {
        if (std::isfinite(logits[t])) allowed.push_back(t);
      }
      if (allowed.empty()) return "";
      int32_t t = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      if (step > 40) {  // end as soon as the grammar lets the output end
        for (int32_t a : allowed) {
          if (tokenizer_->IsEndOfGeneration(a)) t = a;
        }
      }
      EXPECT_TRUE(m.Accept(t));
      if (m.terminated()) return text;
      text += tokenizer_->TokenToPiece(t);
    }
    return "";
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ConstraintCompiler> compiler_;
};

TEST_F(ToolWalkTest, EveryChoiceConstrainsToCallsOfTheRightFunctions) {
  struct Case {
    ToolChoice choice;
    bool parallel;
  };
  const Case cases[] = {{{ToolChoiceMode::kRequired, ""}, true},
                        {{ToolChoiceMode::kRequired, ""}, false},
                        {{ToolChoiceMode::kNamed, "get_time"}, true}};
  for (ChatFormat f : kFormats) {
    for (const Case& k : cases) {
      auto c = compiler_->Compile(
          {.kind = ConstraintKind::kStructuralTag, .source = ToolCallStructuralTag(f, kTools, k.choice, k.parallel)});
      ASSERT_TRUE(c.ok()) << ChatFormatName(f) << ": " << c.status().ToString();
      for (uint64_t seed = 0; seed < 8; ++seed) {
        const std::string text = SanitizeUtf8(Walk(*c, seed));
        const ParsedToolCalls p = ParseToolCalls(f, text, kTools);
        ASSERT_FALSE(p.calls.empty()) << ChatFormatName(f) << " seed " << seed << ": '" << text << "'";
        EXPECT_TRUE(p.content.empty()) << ChatFormatName(f) << ": '" << text << "'";
        if (!k.parallel || k.choice.mode == ToolChoiceMode::kNamed) {
          EXPECT_EQ(p.calls.size(), 1u) << text;
        }
        for (const ToolCall& call : p.calls) {
          if (k.choice.mode == ToolChoiceMode::kNamed) {
            EXPECT_EQ(call.name, "get_time");
          }
          const auto args = nlohmann::json::parse(call.arguments);
          if (call.name == "get_weather") {
            EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Oslo") << call.arguments;
            EXPECT_TRUE(args["days"] >= 1 && args["days"] <= 7) << call.arguments;
          } else {
            EXPECT_TRUE(args["utc"].is_boolean()) << call.arguments;
          }
        }
      }
    }
  }
}

TEST_F(ToolWalkTest, AutoAllowsTextAndConstrainsCallsItStarts) {
  for (ChatFormat f : kFormats) {
    auto c = compiler_->Compile({.kind = ConstraintKind::kStructuralTag,
                                 .source = ToolCallStructuralTag(f, kTools, {ToolChoiceMode::kAuto, ""}, false)});
    ASSERT_TRUE(c.ok()) << ChatFormatName(f) << ": " << c.status().ToString();
    EXPECT_NE(ToolCallStructuralTag(f, kTools, {ToolChoiceMode::kAuto, ""}, false).find("triggered_tags"),
              std::string::npos);
    for (uint64_t seed = 0; seed < 4; ++seed) {
      const std::string out = SanitizeUtf8(Walk(*c, seed));
      const ParsedToolCalls p = ParseToolCalls(f, out, kTools);
      for (const ToolCall& call : p.calls) EXPECT_TRUE(nlohmann::json::parse(call.arguments).is_object());
    }
  }
}

TEST_F(ToolWalkTest, NoneHasNoConstraint) {
  EXPECT_EQ(ToolCallStructuralTag(ChatFormat::kChatMl, kTools, {ToolChoiceMode::kNone, ""}, true), "");
}

}  // namespace
}  // namespace tq::engine

namespace tq::engine {
namespace {

// A vocabulary that holds [TOOL_CALLS] as a control token (as Mistral's does) and spells everything else with
// byte tokens: the constraint may produce the marker token, and printed as its text the output parses.
TEST(ToolMarkerTest, AControlTokenMarkerIsProducedAndParses) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "[TOOL_CALLS]"};
  std::vector<int32_t> types = {2, 3, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    tokens.push_back(name);
    types.push_back(6);
  }
  testing::GgufBuilder g;
  g.AddString("tokenizer.ggml.model", "llama");
  g.AddStringArray("tokenizer.ggml.tokens", tokens);
  g.AddI32Array("tokenizer.ggml.token_type", types);
  g.AddU32("tokenizer.ggml.unknown_token_id", 0).AddU32("tokenizer.ggml.bos_token_id", 1);
  g.AddU32("tokenizer.ggml.eos_token_id", 2);
  const std::vector<uint8_t> bytes = g.Build();
  auto gguf = GgufFile::Parse(bytes);
  ASSERT_TRUE(gguf.ok());
  auto tok = Tokenizer::FromGguf(**gguf);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const Tokenizer& t = **tok;
  const int32_t marker = t.TextToToken("[TOOL_CALLS]");
  ASSERT_EQ(marker, 3);
  for (bool with_markers : {false, true}) {
    auto compiler = ConstraintCompiler::Create(t, t.vocab_size(), with_markers ? ToolMarkerTexts()
                                                                                : std::vector<std::string>{});
    ASSERT_TRUE(compiler.ok()) << compiler.status().ToString();
    auto c = (*compiler)->Compile(
        {.kind = ConstraintKind::kStructuralTag,
         .source = ToolCallStructuralTag(ChatFormat::kMistral, kTools, {ToolChoiceMode::kNamed, "get_time"}, true)});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    TokenMatcher m(*c, t.vocab_size());
    std::vector<float> logits(static_cast<size_t>(t.vocab_size()), 0.0f);
    m.Mask(logits);
    // Without the marker list the control token is never allowed (the call is spelled in bytes).
    EXPECT_EQ(std::isfinite(logits[marker]), with_markers);
  }
  // Forced through the matcher: the marker token, then the rest byte by byte.
  auto compiler = ConstraintCompiler::Create(t, t.vocab_size(), ToolMarkerTexts()).value();
  auto c = compiler->Compile(
      {.kind = ConstraintKind::kStructuralTag,
       .source = ToolCallStructuralTag(ChatFormat::kMistral, kTools, {ToolChoiceMode::kNamed, "get_time"}, true)})
               .value();
  TokenMatcher m(c, t.vocab_size());
  ASSERT_TRUE(m.Accept(marker));
  std::string text = t.TokenToPiece(marker, /*unparse_special=*/true);
  for (unsigned char ch : std::string(R"( [{"name": "get_time", "arguments": {"utc": true}}])")) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", ch);
    const int32_t id = t.TextToToken(name);
    ASSERT_TRUE(m.Accept(id)) << "after '" << text << "'";
    text += t.TokenToPiece(id);
  }
  ASSERT_TRUE(m.Accept(t.eos()));
  EXPECT_TRUE(m.terminated());
  const ParsedToolCalls p = ParseToolCalls(ChatFormat::kMistral, text, kTools);
  ASSERT_EQ(p.calls.size(), 1u) << text;
  EXPECT_EQ(p.calls[0].name, "get_time");
}

}  // namespace
}  // namespace tq::engine
