// Pre-tokenizer tests: the words each tokenizer.ggml.pre splits text into, worked out by hand
// (or with Python's `regex` module) from the published patterns, independent of llama.cpp's
// files; tools/tg-gguf/vocab_test.py and tests/peer/tokenizer_vs_peer compare whole
// tokenizations with llama.cpp.
#include "models/pre_tokenizer.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tg {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// Expected words from Python's `regex` module on the original patterns, which llama.cpp's
// hand-written splitters agree with on these strings.

struct SplitCase {
  std::string text;
  std::vector<std::string> words;
};

void ExpectSplits(BpePreTokenizer kind, const std::vector<SplitCase>& cases) {
  for (const SplitCase& c : cases) {
    EXPECT_THAT(PreTokenize(kind, c.text), ElementsAreArray(c.words)) << c.text;
  }
}

// Llama 3's and Qwen2's splitters differ only in digits (runs of up to three vs one each).
std::vector<SplitCase> Llama3FamilyCases(SplitCase digits) {
  return {
      {"I'M can't WE'LL they'Re", {"I", "'M", " can", "'t", " WE", "'LL", " they", "'Re"}},
      std::move(digits),
      {"Hello!!! ...wow?!", {"Hello", "!!!", " ...", "wow", "?!"}},
      {"a\n\nb\r\n c", {"a", "\n\n", "b", "\r\n", " c"}},
      {"end   ", {"end", "   "}},
      {"你好世界 ok", {"你好世界", " ok"}},
      {"hi 😀👍!", {"hi", " 😀👍!"}},
      {"café naïve Ünïcödé", {"café", " naïve", " Ünïcödé"}},
      {"  lead", {" ", " lead"}},
      {"x  =  y\t\tz", {"x", " ", " =", " ", " y", "\t", "\tz"}},
      {"", {}},
  };
}

TEST(PreTokenizeTest, Llama3) {
  ExpectSplits(BpePreTokenizer::kLlama3,
               Llama3FamilyCases({"1234567 x12", {"123", "456", "7", " x", "12"}}));
}

TEST(PreTokenizeTest, Qwen2) {
  ExpectSplits(
      BpePreTokenizer::kQwen2,
      Llama3FamilyCases({"1234567 x12", {"1", "2", "3", "4", "5", "6", "7", " x", "1", "2"}}));
}

TEST(PreTokenizeTest, Gpt2) {
  ExpectSplits(BpePreTokenizer::kGpt2,
               {
                   {"I'M can't WE'LL they'Re",
                    {"I", "'", "M", " can", "'t", " WE", "'", "LL", " they", "'", "Re"}},
                   {"1234567 x12", {"1234567", " x", "12"}},
                   {"Hello!!! ...wow?!", {"Hello", "!!!", " ...", "wow", "?!"}},
                   {"a\n\nb\r\n c", {"a", "\n", "\n", "b", "\r\n", " c"}},
                   {"end   ", {"end", "   "}},
                   {"你好世界 ok", {"你好世界", " ok"}},
                   {"hi 😀👍!", {"hi", " 😀👍!"}},
                   {"café naïve Ünïcödé", {"café", " naïve", " Ünïcödé"}},
                   {"  lead", {" ", " lead"}},
                   {"x  =  y\t\tz", {"x", " ", " =", " ", " y", "\t", "\t", "z"}},
               });
}

TEST(PreTokenizeTest, DefaultChain) {
  ExpectSplits(BpePreTokenizer::kDefault,
               {
                   {"Hello, world! 12345 $x+=1",
                    {"Hello", ",", " world", "!", " ", "123", "45", " ", "$", "x", "+=", "1"}},
                   {"a`b 1234567", {"a", "`", "b", " ", "123", "456", "7"}},
               });
}

// gpt-4o, worked out by hand from the regex llama.cpp runs (tokenizer_bpe.h, kGpt4o): a
// non-ASCII letter counts as upper and lower case, combining marks are not letters.
TEST(PreTokenizeTest, Gpt4o) {
  ExpectSplits(
      BpePreTokenizer::kGpt4o,
      {
          {"HelloWorld camelCase HTTPServer", {"Hello", "World", " camel", "Case", " HTTPServer"}},
          {"DON'T don't I'm WE'LL they'Re 'tis",
           {"DON'T", " don't", " I'm", " WE'LL", " they'Re", " '", "tis"}},
          {"12345 x1234567 \u0663\u0664\u0665\u0666",
           {"123", "45", " x", "123", "456", "7", " ", "\u0663\u0664\u0665", "\u0666"}},
          {"$12 -3", {"$", "12", " -", "3"}},
          {"end.\n\nNext!!\n/x a/b", {"end", ".\n\n", "Next", "!!\n/", "x", " a", "/b"}},
          {"http://x.com/a", {"http", "://", "x", ".com", "/a"}},
          {"a\r\n\r\nb", {"a", "\r\n\r\n", "b"}},
          {"你好世界 ok 日本語のテキスト", {"你好世界", " ok", " 日本語のテキスト"}},
          {"café naïve Ünïcödé", {"café", " naïve", " Ünïcödé"}},
          // An upper run ending in A-Z stops after its last non-ASCII letter, which also
          // counts as lower case (tiktoken keeps "ÜBER" and "WÖRLD" whole).
          {"ÜBER HelloWÖRLD", {"Ü", "BER", " Hello", "WÖ", "RLD"}},
          // A combining mark is no letter: it leads the next word or stands alone.
          {"cafe\u0301s e\u0301", {"cafe", "\u0301s", " e", "\u0301"}},
          {"a   b\t\tc  \n d ", {"a", "  ", " b", "\t", "\tc", "  \n", " d", " "}},
          {"x\u00A0y\u3000\u3000z", {"x", "\u00A0y", "\u3000", "\u3000z"}},
          {"hi 😀👍! ❤️", {"hi", " 😀👍!", " ❤️"}},
          {"", {}},
      });
}

// Like qwen2, but combining marks belong to words (a mark before a letter run starts a word).
TEST(PreTokenizeTest, Qwen35) {
  ExpectSplits(BpePreTokenizer::kQwen35,
               {
                   {"cafe\u0301s e\u0301 12", {"cafe\u0301s", " e\u0301", " ", "1", "2"}},
                   {"\u0301abc!\u0301", {"\u0301abc", "!\u0301"}},
                   {"I'M can't", {"I", "'M", " can", "'t"}},
               });
  // qwen2 on the same text: marks are no letters.
  EXPECT_THAT(PreTokenize(BpePreTokenizer::kQwen2, "cafe\u0301s e\u0301"),
              ElementsAreArray({"cafe", "\u0301s", " e", "\u0301"}));
}

// Punctuation runs (backtick included, unlike "default"), the GPT-2 pattern, digit triples.
TEST(PreTokenizeTest, Falcon) {
  ExpectSplits(BpePreTokenizer::kFalcon,
               {
                   {"Hello, world! 12345 $x+=1 a`b",
                    {"Hello", ",", " world", "!", " ", "123", "45", " ", "$", "x", "+=", "1", " a",
                     "`", "b"}},
                   // The GPT-2 step sees "x  " alone: its trailing spaces stay together.
                   {"x  =  y", {"x", "  ", "=", " ", " y"}},
               });
  // The backtick is a symbol: "default" leaves it to the GPT-2 step, with its space.
  EXPECT_THAT(PreTokenize(BpePreTokenizer::kFalcon, "a `b"),
              ElementsAreArray({"a", " ", "`", "b"}));
  EXPECT_THAT(PreTokenize(BpePreTokenizer::kDefault, "a `b"), ElementsAreArray({"a", " `", "b"}));
}

// Every digit alone, then the GPT-2 pattern (starcoder, refact, command-r...).
TEST(PreTokenizeTest, Starcoder) {
  ExpectSplits(BpePreTokenizer::kStarcoder,
               {
                   {"x = 123; y2k", {"x", " =", " ", "1", "2", "3", ";", " y", "2", "k"}},
                   {"I'm 42 years", {"I", "'m", " ", "4", "2", " years"}},
                   {"\u0663\u0664 ok", {"\u0663", "\u0664", " ok"}},
               });
}

TEST(PreTokenizeTest, DeepseekLlm) {
  ExpectSplits(
      BpePreTokenizer::kDeepseekLlm,
      {
          // Latin words take one leading space; "," and "!" are punctuation runs;
          // CJK is a run of its own, digits too, and trailing spaces stay together.
          {"Hello, 世界! 123 ok  ", {"Hello", ",", " ", "世界", "!", " ", "123", " ok", "  "}},
          {"a\r\nb", {"a", "\r", "\n", "b"}},
          {"x Ωμέγα Привет", {"x", " Ωμέγα", " Привет"}},
          // Fullwidth punctuation and curly quotes make one punctuation run, which
          // the CJK step splits again: its range U+0800..U+4E00 takes the quotes.
          {"好，“x”", {"好", "，", "“", "x", "”"}},
      });
}

TEST(PreTokenizeTest, DeepseekCoder) {
  ExpectSplits(
      BpePreTokenizer::kDeepseekCoder,
      {
          {"def f(x):\n    return x+1 你好",
           {"def", " f", "(", "x", "):", "\n", "   ", " return", " x", "+", "1", " ", "你好"}},
          {"v12 ok", {"v", "1", "2", " ok"}},
      });
}

// gemma4 splits only into runs of newlines and runs of the rest (its spaces are escaped before).
TEST(PreTokenizeTest, Gemma4) {
  ExpectSplits(BpePreTokenizer::kGemma4, {
                                             {"a b\n\nc\r\n", {"a b", "\n\n", "c\r", "\n"}},
                                             {"\n", {"\n"}},
                                             {"", {}},
                                         });
}

TEST(PreTokenizeTest, ParsesNames) {
  EXPECT_EQ(*ParseBpePreTokenizer("llama-bpe"), BpePreTokenizer::kLlama3);
  EXPECT_EQ(*ParseBpePreTokenizer("llama3"), BpePreTokenizer::kLlama3);
  EXPECT_EQ(*ParseBpePreTokenizer("qwen2"), BpePreTokenizer::kQwen2);
  EXPECT_EQ(*ParseBpePreTokenizer("qwen35"), BpePreTokenizer::kQwen35);
  EXPECT_EQ(*ParseBpePreTokenizer("gpt2"), BpePreTokenizer::kGpt2);
  EXPECT_EQ(*ParseBpePreTokenizer("mpt"), BpePreTokenizer::kGpt2);
  EXPECT_EQ(*ParseBpePreTokenizer("default"), BpePreTokenizer::kDefault);
  EXPECT_EQ(*ParseBpePreTokenizer("gpt-4o"), BpePreTokenizer::kGpt4o);
  EXPECT_EQ(*ParseBpePreTokenizer("llama4"), BpePreTokenizer::kGpt4o);
  EXPECT_EQ(*ParseBpePreTokenizer("falcon"), BpePreTokenizer::kFalcon);
  EXPECT_EQ(*ParseBpePreTokenizer("starcoder"), BpePreTokenizer::kStarcoder);
  EXPECT_EQ(*ParseBpePreTokenizer("refact"), BpePreTokenizer::kStarcoder);
  EXPECT_EQ(*ParseBpePreTokenizer("command-r"), BpePreTokenizer::kStarcoder);
  EXPECT_EQ(*ParseBpePreTokenizer("deepseek-llm"), BpePreTokenizer::kDeepseekLlm);
  EXPECT_EQ(*ParseBpePreTokenizer("deepseek-coder"), BpePreTokenizer::kDeepseekCoder);
  EXPECT_EQ(*ParseBpePreTokenizer("gemma4"), BpePreTokenizer::kGemma4);
  const auto bad = ParseBpePreTokenizer("nonesuch");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("tokenizer.ggml.pre"));
  EXPECT_THAT(bad.status().message(), HasSubstr("nonesuch"));
  // Every accepted name parses (and its chain compiles and splits).
  for (const std::string& name : BpePreTokenizerNames()) {
    const auto kind = ParseBpePreTokenizer(name);
    ASSERT_TRUE(kind.ok()) << name;
    EXPECT_THAT(PreTokenize(*kind, "Hi, 12 you!\n"), ::testing::Not(::testing::IsEmpty()));
  }
}

}  // namespace
}  // namespace tg
