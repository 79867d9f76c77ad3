#include "engine/runner/text_stream.h"

#include <gtest/gtest.h>

namespace tq::engine {
namespace {

std::string PushAll(TextStream& s, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += s.Push(p);
  return out;
}

TEST(TextStreamTest, PassesPlainText) {
  TextStream s({});
  EXPECT_EQ(s.Push("Hello"), "Hello");
  EXPECT_EQ(s.Push(" world"), " world");
  EXPECT_EQ(s.Flush(), "");
}

TEST(TextStreamTest, HoldsIncompleteUtf8) {
  TextStream s({});
  // "é" = C3 A9 split over two tokens; "😀" = F0 9F 98 80 split over three.
  EXPECT_EQ(s.Push("caf\xC3"), "caf");
  EXPECT_EQ(s.Push("\xA9 "), "\xC3\xA9 ");
  EXPECT_EQ(s.Push("\xF0\x9F"), "");
  EXPECT_EQ(s.Push("\x98"), "");
  EXPECT_EQ(s.Push("\x80!"), "\xF0\x9F\x98\x80!");
}

TEST(TextStreamTest, CutOffCodePointBecomesReplacementCharacter) {
  TextStream s({});
  EXPECT_EQ(s.Push("a\xE2\x82"), "a");
  EXPECT_EQ(s.Flush(), "\xEF\xBF\xBD");
}

TEST(TextStreamTest, StopStringIsCutAndHeldBackWhilePossible) {
  TextStream s({"</end>"});
  EXPECT_EQ(s.Push("one two <"), "one two ");
  EXPECT_EQ(s.Push("/en"), "");
  EXPECT_FALSE(s.stopped());
  EXPECT_EQ(s.Push("d> three"), "");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.matched_stop(), "</end>");
  EXPECT_EQ(s.Push("more"), "");
  EXPECT_EQ(s.Flush(), "");
}

TEST(TextStreamTest, FalseStartIsReleased) {
  TextStream s({"STOP"});
  std::string out = PushAll(s, {"a ST", "OR", "Y"});
  out += s.Flush();
  EXPECT_EQ(out, "a STORY");
  EXPECT_FALSE(s.stopped());
}

TEST(TextStreamTest, EarliestOfSeveralStopsWins) {
  TextStream s({"cd", "b"});
  EXPECT_EQ(s.Push("abcd"), "a");
  EXPECT_EQ(s.matched_stop(), "b");
}

TEST(TextStreamTest, StopInsideOneToken) {
  TextStream s({"\n\n"});
  EXPECT_EQ(s.Push("line\n\nnext"), "line");
  EXPECT_TRUE(s.stopped());
}

TEST(Utf8Test, Validity) {
  EXPECT_TRUE(IsValidUtf8("plain"));
  EXPECT_TRUE(IsValidUtf8("\xC3\xA9\xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xC3"));
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xFF"));
  EXPECT_EQ(CompleteUtf8Prefix("ab\xE2\x82"), 2u);
  EXPECT_EQ(CompleteUtf8Prefix("ab\xE2\x82\xAC"), 5u);
  EXPECT_EQ(CompleteUtf8Prefix("\x80\x80"), 2u);  // stray continuation bytes never block
}

}  // namespace
}  // namespace tq::engine
