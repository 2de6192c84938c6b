// PreTokenizerRegex tests: matches and splits worked out by hand from ECMAScript's rules (the
// first alternative that lets the pattern match wins, greedy quantifiers backtrack), the
// Unicode classes, llama.cpp's treatment of non-ASCII spaces, and the refused constructs.
#include "models/pre_tokenizer_regex.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/unicode.h"

namespace tg {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Optional;

PreTokenizerRegex MustCompile(const std::string& pattern) {
  auto re = PreTokenizerRegex::Compile(pattern);
  EXPECT_TRUE(re.ok()) << re.status();
  return std::move(*re);
}

// Where the match of `pattern` starting at codepoint 0 of `text` ends, or -1.
int MatchEnd(const std::string& pattern, const std::string& text) {
  const std::vector<uint32_t> cpts = DecodeUtf8Lenient(text);
  const auto end = MustCompile(pattern).MatchAt(cpts, 0);
  return end ? static_cast<int>(*end) : -1;
}

// The words `text` (one piece) splits into.
std::vector<std::string> Split(const std::string& pattern, const std::string& text) {
  const std::vector<uint32_t> cpts = DecodeUtf8Lenient(text);
  const std::vector<size_t> whole = {cpts.size()};
  std::vector<std::string> words;
  size_t start = 0;
  for (size_t len : MustCompile(pattern).Split(cpts, whole)) {
    std::string& w = words.emplace_back();
    for (size_t i = start; i < start + len; ++i) AppendUtf8(cpts[i], &w);
    start += len;
  }
  return words;
}

TEST(PreTokenizerRegexTest, AlternativesInOrderNotLongest) {
  EXPECT_EQ(MatchEnd("a|ab", "abc"), 1);
  EXPECT_EQ(MatchEnd("ab|a", "abc"), 2);
  // The first alternative is dropped only when the rest of the pattern cannot follow it.
  EXPECT_EQ(MatchEnd("(?:a|ab)c", "abc"), 3);
  EXPECT_EQ(MatchEnd("x|y", "abc"), -1);
}

TEST(PreTokenizerRegexTest, QuantifiersAreGreedyAndBacktrack) {
  EXPECT_EQ(MatchEnd("a+", "aaab"), 3);
  EXPECT_EQ(MatchEnd("a+?", "aaab"), 1);
  EXPECT_EQ(MatchEnd("a*ab", "aaab"), 4);
  EXPECT_EQ(MatchEnd("\\p{N}{1,3}", "12345"), 3);
  EXPECT_EQ(MatchEnd("\\p{N}{2}", "1x"), -1);
  EXPECT_EQ(MatchEnd("\\p{N}{2,}", "12345"), 5);
  EXPECT_EQ(MatchEnd("(?:ab)+", "ababa"), 4);
  EXPECT_EQ(MatchEnd("(?:ab)?c", "c"), 1);
  // \s+(?!\S): the run gives back its last space when a non-space follows.
  EXPECT_EQ(MatchEnd("\\s+(?!\\S)", "   x"), 2);
  EXPECT_EQ(MatchEnd("\\s+(?!\\S)", "   "), 3);
  EXPECT_EQ(MatchEnd("a(?=b)", "ab"), 1);
  EXPECT_EQ(MatchEnd("a(?=b)", "ac"), -1);
}

TEST(PreTokenizerRegexTest, UnicodeClasses) {
  EXPECT_EQ(MatchEnd("\\p{L}+", "héllo世界 x"), 7);
  EXPECT_EQ(MatchEnd("\\p{N}+", "12\u0663\u2167x"), 4);  // ASCII, Arabic-Indic, Roman XII.
  EXPECT_EQ(MatchEnd("\\p{P}+", "!\u3001\u00BF$"), 3);   // "$" is a symbol.
  EXPECT_EQ(MatchEnd("\\p{S}+", "$+\u20AC\u00A9!"), 4);
  EXPECT_EQ(MatchEnd("\\p{M}+", "\u0301\u0308a"), 2);
  EXPECT_EQ(MatchEnd("[^\\s\\p{L}\\p{N}]+", "!?\U0001F600\u00E9"), 3);
  EXPECT_EQ(MatchEnd("\\d+", "12\u0663"), 2);  // \d is ASCII only.
  EXPECT_EQ(MatchEnd(".+", "ab\ncd"), 2);
  EXPECT_EQ(MatchEnd("[\U00010400-\U0001044F]+", "\U00010437\U00010437x"), 2);
  EXPECT_EQ(MatchEnd("[\\u00e0-\\u00e9]+", "\u00e0\u00e9\u00ea"), 2);
  EXPECT_EQ(MatchEnd("[a-c-]+", "ab-cd"), 4);  // a trailing '-' is literal.
}

// llama.cpp matches a non-ASCII space as U+000B: \s takes it, a literal or a range never does.
TEST(PreTokenizerRegexTest, NonAsciiSpacesAreMatchedAsVerticalTab) {
  EXPECT_EQ(MatchEnd("\\s+", "\u3000\u00A0\u2003x"), 3);
  EXPECT_EQ(MatchEnd("[\u3000-\u3002]+", "\u3000\u3001"), -1);
  EXPECT_EQ(MatchEnd("[\u3000-\u3002]+", "\u3001\u3002\u3000"), 2);
  EXPECT_EQ(MatchEnd("\\v", "\u3000"), 1);
  EXPECT_EQ(MatchEnd("[^\\s]", "\u2028"), -1);
}

TEST(PreTokenizerRegexTest, SplitKeepsMatchesAndTheTextBetween) {
  EXPECT_THAT(Split("[0-9][0-9][0-9]", "a12345b"), ElementsAre("a", "123", "45b"));
  EXPECT_THAT(Split("\\p{N}", "x12"), ElementsAre("x", "1", "2"));
  EXPECT_THAT(Split("[\\r\\n]", "a\r\nb\n"), ElementsAre("a", "\r", "\n", "b", "\n"));
  EXPECT_THAT(Split("\\s?\\p{L}+", "   return x+1"), ElementsAre("  ", " return", " x", "+1"));
  EXPECT_THAT(Split("\\s+$", "a  b  "), ElementsAre("a  b", "  "));
  EXPECT_THAT(Split("z", "abc"), ElementsAre("abc"));
  EXPECT_THAT(Split("a", ""), ElementsAre());
  // A failed start inside a run of the leading repeat's class is not retried further in.
  EXPECT_THAT(Split("\\s+x", "   y  x"), ElementsAre("   y", "  x"));
  EXPECT_THAT(Split("\\s*x", " y x"), ElementsAre(" y", " x"));
  EXPECT_THAT(Split("\\p{L}*b", "aab cb"), ElementsAre("aab", " ", "cb"));
  // Empty matches make no piece.
  EXPECT_THAT(Split("x*", "axb"), ElementsAre("a", "x", "b"));
}

// Each piece is matched alone: lookaheads and $ stop at its end, and matches never span two.
TEST(PreTokenizerRegexTest, SplitTreatsEachPieceAlone) {
  const std::vector<uint32_t> cpts = DecodeUtf8Lenient("ab  cd");
  const std::vector<size_t> pieces = {4, 2};  // "ab  " and "cd".
  EXPECT_THAT(MustCompile("\\s+(?!\\S)").Split(cpts, pieces), ElementsAreArray({2u, 2u, 2u}));
  EXPECT_THAT(MustCompile("\\s+$").Split(cpts, pieces), ElementsAreArray({2u, 2u, 2u}));
  EXPECT_THAT(MustCompile("b c|\\p{L}+").Split(cpts, pieces), ElementsAreArray({2u, 2u, 2u}));
}

TEST(PreTokenizerRegexTest, RefusesWhatItDoesNotImplement) {
  for (const char* bad : {"(?i:'s)", "\\p{Lu}", "\\p{Han}+", "a{2,1}", "[a", "(a", "a)", "*a",
                          "\\1", "^a", "(?<=a)b", "a\\", "\\bx", "[z-a]", "(?=a)+", "[]"}) {
    const auto re = PreTokenizerRegex::Compile(bad);
    ASSERT_FALSE(re.ok()) << bad;
    EXPECT_EQ(re.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(re.status().message(), HasSubstr(bad)) << bad;
  }
}

}  // namespace
}  // namespace tg
