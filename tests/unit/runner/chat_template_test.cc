#include "engine/runner/chat_template.h"

#include <gtest/gtest.h>

namespace tq::engine {
namespace {

// SmolLM2-135M-Instruct's template (from its GGUF), abridged to the parts that matter.
constexpr std::string_view kSmolTemplate =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}";

TEST(ChatTemplateTest, ChatMlWithDefaultSystem) {
  auto t = DetectChatTemplate(kSmolTemplate);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->format, ChatFormat::kChatMl);
  EXPECT_EQ(t->default_system, "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  auto text = RenderChat(*t, {{"user", "Hi"}});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  auto own = RenderChat(*t, {{"system", "Be brief."}, {"user", "Hi"}});
  EXPECT_EQ(*own, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, Llama3AndMistral) {
  auto l3 = DetectChatTemplate("{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}");
  ASSERT_TRUE(l3.ok());
  EXPECT_EQ(*RenderChat(*l3, {{"user", "Q"}}),
            "<|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  auto mi = DetectChatTemplate("{{ '[INST] ' + message['content'] + ' [/INST]' }}");
  ASSERT_TRUE(mi.ok());
  EXPECT_EQ(*RenderChat(*mi, {{"system", "S"}, {"user", "A"}, {"assistant", "B"}, {"user", "C"}}),
            "[INST] S\n\nA [/INST] B</s>[INST] C [/INST]");
}

TEST(ChatTemplateTest, Errors) {
  EXPECT_EQ(DetectChatTemplate("{{ unknown }}").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DetectChatTemplate("").status().code(), StatusCode::kInvalidArgument);
  ChatTemplate t;
  EXPECT_FALSE(RenderChat(t, {}).ok());
  EXPECT_FALSE(RenderChat(t, {{"robot", "x"}}).ok());
  EXPECT_TRUE(ParseChatFormat("llama3").ok());
  EXPECT_FALSE(ParseChatFormat("vicuna").ok());
}

}  // namespace
}  // namespace tq::engine
