// StopText: stop strings across token boundaries never sent in part, UTF-8 characters cut
// between tokens held back, the text before a stop string kept.
#include "serve/stop_text.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tg::serve {
namespace {

// Feeds the pieces; returns what was sent, chunk by chunk.
std::vector<std::string> Feed(StopText& s, const std::vector<std::string>& pieces) {
  std::vector<std::string> sent;
  for (const std::string& p : pieces) sent.push_back(s.Add(p));
  sent.push_back(s.Flush());
  return sent;
}

TEST(StopTextTest, AStopStringAcrossTokensIsNeverSentInPart) {
  StopText s({"\nUser:"});
  const std::vector<std::string> sent = Feed(s, {"Hi", " there", "\nUs", "er", ":", " more"});
  EXPECT_EQ(sent, (std::vector<std::string>{"Hi", " there", "", "", "", "", ""}));
  EXPECT_TRUE(s.stopped());
}

TEST(StopTextTest, HeldTextIsSentOnceItCannotStartAStopString) {
  StopText s({"END"});
  EXPECT_EQ(s.Add("the E"), "the ");
  EXPECT_EQ(s.Add("Nd"), "ENd");  // "ENd" is no prefix of "END".
  EXPECT_EQ(s.Add(" EN"), " ");
  EXPECT_EQ(s.Flush(), "EN");  // generation ended first: what was held is output.
  EXPECT_FALSE(s.stopped());
}

TEST(StopTextTest, TheEarliestOfSeveralStopStringsWins) {
  StopText s({"cat", "at the"});
  EXPECT_EQ(s.Add("look at the cat"), "look ");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.Add("more"), "");
}

TEST(StopTextTest, AUtf8CharacterCutBetweenTokensIsHeldBack) {
  StopText s({});
  const std::string e_acute = "\xC3\xA9", emoji = "\xF0\x9F\x98\x80";
  EXPECT_EQ(s.Add("caf\xC3"), "caf");
  EXPECT_EQ(s.Add("\xA9 "), e_acute + " ");
  EXPECT_EQ(s.Add(emoji.substr(0, 2)), "");
  EXPECT_EQ(s.Add(emoji.substr(2)), emoji);
  EXPECT_EQ(IncompleteUtf8Tail("ab\xE2\x82"), 2u);
  EXPECT_EQ(IncompleteUtf8Tail("ab\xE2\x82\xAC"), 0u);
}

}  // namespace
}  // namespace tg::serve
