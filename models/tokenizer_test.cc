// Tokenizer tests: SPM and BPE on tiny hand-made vocabularies (written with GgufWriter and
// read back with GgufFile::FromBytes), the Unicode helpers, and the real stories260K
// vocabulary against llama.cpp's ids. The pre-tokenizer splits: pre_tokenizer_test.cc.
#include "models/tokenizer.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/shared_model_path.h"
#include "models/token_type.h"
#include "models/tokenizer_bpe.h"
#include "models/unicode.h"

namespace tg {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A tokenizer together with the GGUF bytes and file it was read from.
struct Loaded {
  std::vector<uint8_t> bytes;
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tok;
};

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadFrom(const GgufWriter& w, Loaded* out) {
  out->bytes = w.Serialize();
  auto file = GgufFile::FromBytes(out->bytes);
  if (!file.ok()) return file.status();
  out->file = std::move(*file);
  return Tokenizer::FromGguf(*out->file);
}

Loaded MustLoad(const GgufWriter& w) {
  Loaded l;
  auto tok = LoadFrom(w, &l);
  EXPECT_TRUE(tok.ok()) << tok.status();
  if (tok.ok()) l.tok = std::move(*tok);
  return l;
}

// ---- SPM -------------------------------------------------------------------------------------

// A llama-style vocabulary: <unk> <s> </s>, the 256 byte tokens, then `pieces` with scores.
struct SpmVocab {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {kTokenTypeUnknown, kTokenTypeControl, kTokenTypeControl};

  explicit SpmVocab(bool with_bytes = true) {
    for (int b = 0; with_bytes && b < 256; ++b)
      Add(absl::StrFormat("<0x%02X>", b), 0, kTokenTypeByte);
  }
  int32_t Add(const std::string& text, float score, int32_t type = kTokenTypeNormal) {
    tokens.push_back(text);
    scores.push_back(score);
    types.push_back(type);
    return static_cast<int32_t>(tokens.size()) - 1;
  }
  int32_t Id(const std::string& text) const {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] == text) return static_cast<int32_t>(i);
    }
    ADD_FAILURE() << "no token " << text;
    return -1;
  }
  GgufWriter Writer() const {
    GgufWriter w;
    w.SetString("tokenizer.ggml.model", "llama");
    w.SetStringArray("tokenizer.ggml.tokens", tokens);
    w.SetF32Array("tokenizer.ggml.scores", scores);
    w.SetI32Array("tokenizer.ggml.token_type", types);
    return w;
  }
};

constexpr int32_t kByteBase = 3;  // id of <0x00> in SpmVocab.

TEST(SpmTokenizerTest, MergesHighestScoreFirst) {
  for (const bool bc_wins : {true, false}) {
    SpmVocab v;
    const int32_t a = v.Add("a", -5), c = v.Add("c", -5);
    v.Add("b", -5);
    const int32_t ab = v.Add("ab", bc_wins ? -2.0f : -1.0f);
    const int32_t bc = v.Add("bc", bc_wins ? -1.0f : -2.0f);
    GgufWriter w = v.Writer();
    w.SetBool("tokenizer.ggml.add_space_prefix", false);
    Loaded l = MustLoad(w);
    ASSERT_TRUE(l.tok);
    if (bc_wins) {
      EXPECT_THAT(l.tok->Encode("abc", false), ElementsAre(a, bc));
    } else {
      EXPECT_THAT(l.tok->Encode("abc", false), ElementsAre(ab, c));
    }
  }
}

TEST(SpmTokenizerTest, EqualScoresMergeLeftmostFirst) {
  SpmVocab v;
  v.Add("a", -5);
  const int32_t aa = v.Add("aa", -1);
  const int32_t a = v.Id("a");
  GgufWriter w = v.Writer();
  w.SetBool("tokenizer.ggml.add_space_prefix", false);
  Loaded l = MustLoad(w);
  ASSERT_TRUE(l.tok);
  EXPECT_THAT(l.tok->Encode("aaa", false), ElementsAre(aa, a));
}

TEST(SpmTokenizerTest, SpacePrefixAndEscapedSpaces) {
  SpmVocab v;
  for (const char* p : {"▁", "h", "i", "▁h", "hi", "▁hi"}) v.Add(p, -1);
  const int32_t spacehi = v.Id("▁hi"), space = v.Id("▁");
  v.scores[spacehi] = 0;
  Loaded l = MustLoad(v.Writer());
  ASSERT_TRUE(l.tok);
  EXPECT_THAT(l.tok->Encode("hi hi", false), ElementsAre(spacehi, spacehi));
  EXPECT_THAT(l.tok->Encode(" hi", false), ElementsAre(space, spacehi));
  EXPECT_EQ(l.tok->TokenToPiece(spacehi), " hi");
}

TEST(SpmTokenizerTest, ByteFallbackForCharactersOutsideTheVocab) {
  SpmVocab v;
  const int32_t space = v.Add("▁", -1);
  Loaded l = MustLoad(v.Writer());
  ASSERT_TRUE(l.tok);
  EXPECT_THAT(l.tok->Encode("€", false),
              ElementsAre(space, kByteBase + 0xE2, kByteBase + 0x82, kByteBase + 0xAC));
  EXPECT_EQ(l.tok->TokenToPiece(kByteBase + 0xE2), "\xE2");
}

TEST(SpmTokenizerTest, UnkWhenTheVocabHasNoByteTokens) {
  SpmVocab v(/*with_bytes=*/false);
  const int32_t x = v.Add("x", -1);
  GgufWriter w = v.Writer();
  w.SetBool("tokenizer.ggml.add_space_prefix", false);
  Loaded l = MustLoad(w);
  ASSERT_TRUE(l.tok);
  EXPECT_THAT(l.tok->Encode("xé", false), ElementsAre(x, 0, 0));  // é is two bytes.
}

TEST(SpmTokenizerTest, BosAndEosFollowTheFlags) {
  SpmVocab v;
  const int32_t space = v.Add("▁", -1);
  {
    Loaded l = MustLoad(v.Writer());
    ASSERT_TRUE(l.tok);
    EXPECT_THAT(l.tok->Encode(" ", true), ElementsAre(1, space, space));
    EXPECT_THAT(l.tok->Encode("", true), ElementsAre(1));  // no space prefix without text.
    EXPECT_THAT(l.tok->Encode("", false), ElementsAre());
    EXPECT_EQ(l.tok->bos(), 1);
    EXPECT_EQ(l.tok->eos(), 2);
    EXPECT_TRUE(l.tok->IsEog(2));
    EXPECT_FALSE(l.tok->IsEog(1));
  }
  GgufWriter w = v.Writer();
  w.SetBool("tokenizer.ggml.add_bos_token", false);
  w.SetBool("tokenizer.ggml.add_eos_token", true);
  Loaded l = MustLoad(w);
  ASSERT_TRUE(l.tok);
  EXPECT_THAT(l.tok->Encode("", true), ElementsAre(2));
  EXPECT_THAT(l.tok->Encode(" ", true), ElementsAre(space, space, 2));
}

TEST(SpmTokenizerTest, ControlTokensRenderAsTextButDecodeSkipsThem) {
  SpmVocab v;
  Loaded l = MustLoad(v.Writer());
  ASSERT_TRUE(l.tok);
  EXPECT_EQ(l.tok->TokenToPiece(1), "<s>");
  EXPECT_EQ(l.tok->TokenToPiece(0), "<unk>");
  EXPECT_EQ(l.tok->Decode(std::vector<int32_t>{1, 2}), "");
}

TEST(SpmTokenizerTest, UserDefinedTokensAreCutOutOfTheText) {
  SpmVocab v;
  for (const char* p : {"▁", "a", "▁a"}) v.Add(p, -1);
  const int32_t ud = v.Add("<tag>", 0, kTokenTypeUserDefined);
  const int32_t spacea = v.Id("▁a");
  Loaded l = MustLoad(v.Writer());
  ASSERT_TRUE(l.tok);
  // As llama.cpp: each text fragment after a special token gets the space prefix again.
  EXPECT_THAT(l.tok->Encode("a<tag>a", false), ElementsAre(spacea, ud, spacea));
  EXPECT_EQ(l.tok->Decode(l.tok->Encode("a<tag>a", false)), "a<tag>a");
}

TEST(SpmTokenizerTest, RoundTripsAsciiAndMultiByteText) {
  SpmVocab v;
  for (const char* p : {"▁", "e", "l", "o", "▁h", "ll", "llo", "▁hello", "é", "▁w", "or", "ld"}) {
    v.Add(p, -1);
  }
  Loaded l = MustLoad(v.Writer());
  ASSERT_TRUE(l.tok);
  for (const std::string text : {"hello world", "  two leading, trailing  ", "line\nbreak\ttab",
                                 "héllo wörld €😀", "日本語のテキスト", "", " "}) {
    EXPECT_EQ(l.tok->Decode(l.tok->Encode(text, true)), text);
    EXPECT_EQ(l.tok->Decode(l.tok->Encode(text, false)), text);
  }
}

TEST(SpmTokenizerTest, RejectsBadVocabularies) {
  SpmVocab v;
  v.Add("a", 0);
  v.Add("a", 0);
  Loaded l;
  auto dup = LoadFrom(v.Writer(), &l);
  ASSERT_FALSE(dup.ok());
  EXPECT_THAT(dup.status().message(), HasSubstr("appears twice"));

  GgufWriter w;
  w.SetString("tokenizer.ggml.model", "t5");
  w.SetStringArray("tokenizer.ggml.tokens", std::vector<std::string>{"a"});
  auto t5 = LoadFrom(w, &l);
  ASSERT_FALSE(t5.ok());
  EXPECT_THAT(t5.status().message(), HasSubstr("tokenizer.ggml.model"));

  SpmVocab short_scores;
  GgufWriter w2 = short_scores.Writer();
  w2.SetF32Array("tokenizer.ggml.scores", std::vector<float>{0});
  auto s = LoadFrom(w2, &l);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("tokenizer.ggml.scores"));
}

// ---- BPE -------------------------------------------------------------------------------------

// GPT-2 byte-level text of raw bytes.
std::string ByteLevel(absl::string_view raw) {
  std::string out;
  for (char c : raw) AppendUtf8(ByteToUnicode(static_cast<uint8_t>(c)), &out);
  return out;
}

// A byte-level vocabulary: the 256 byte characters, then merged tokens and special tokens.
struct BpeVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;

  BpeVocab() {
    for (int b = 0; b < 256; ++b) Add(ByteLevel(std::string(1, static_cast<char>(b))));
  }
  int32_t Add(const std::string& text, int32_t type = kTokenTypeNormal) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] == text) return static_cast<int32_t>(i);
    }
    tokens.push_back(text);
    types.push_back(type);
    return static_cast<int32_t>(tokens.size()) - 1;
  }
  int32_t Id(absl::string_view raw) const {
    const std::string text = ByteLevel(raw);
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] == text) return static_cast<int32_t>(i);
    }
    ADD_FAILURE() << "no token for " << raw;
    return -1;
  }
  // Adds the merge of two raw strings (next rank) and the token it makes.
  int32_t Merge(absl::string_view left, absl::string_view right) {
    merges.push_back(absl::StrCat(ByteLevel(left), " ", ByteLevel(right)));
    return Add(ByteLevel(absl::StrCat(left, right)));
  }
  GgufWriter Writer(absl::string_view pre) const {
    GgufWriter w;
    w.SetString("tokenizer.ggml.model", "gpt2");
    w.SetString("tokenizer.ggml.pre", pre);
    w.SetStringArray("tokenizer.ggml.tokens", tokens);
    w.SetI32Array("tokenizer.ggml.token_type", types);
    w.SetStringArray("tokenizer.ggml.merges", merges);
    return w;
  }
};

TEST(BpeTokenizerTest, MergesLowestRankFirst) {
  for (const bool bc_first : {true, false}) {
    BpeVocab v;
    if (bc_first) {
      v.Merge("b", "c");
      v.Merge("a", "b");
    } else {
      v.Merge("a", "b");
      v.Merge("b", "c");
    }
    Loaded l = MustLoad(v.Writer("gpt-2"));
    ASSERT_TRUE(l.tok);
    if (bc_first) {
      EXPECT_THAT(l.tok->Encode("abc", false), ElementsAre(v.Id("a"), v.Id("bc")));
    } else {
      EXPECT_THAT(l.tok->Encode("abc", false), ElementsAre(v.Id("ab"), v.Id("c")));
    }
  }
}

TEST(BpeTokenizerTest, MergesChainIntoWordTokens) {
  BpeVocab v;
  v.Merge(" ", "w");
  v.Merge("o", "r");
  v.Merge(" w", "or");
  v.Merge("l", "d");
  const int32_t world = v.Merge(" wor", "ld");
  Loaded l = MustLoad(v.Writer("qwen2"));
  ASSERT_TRUE(l.tok);
  EXPECT_THAT(l.tok->Encode("hi world", false), ElementsAre(v.Id("h"), v.Id("i"), world));
  EXPECT_EQ(l.tok->TokenToPiece(world), " world");
}

TEST(BpeTokenizerTest, Llama3TakesWholeWordTokensWithoutMerges) {
  // "abc" is a token no merge leads to: llama3 (ignore_merges) uses it, qwen2 cannot.
  BpeVocab v;
  const int32_t abc = v.Add("abc");
  Loaded llama3 = MustLoad(v.Writer("llama-bpe"));
  Loaded qwen2 = MustLoad(v.Writer("qwen2"));
  ASSERT_TRUE(llama3.tok && qwen2.tok);
  EXPECT_THAT(llama3.tok->Encode("abc", false), ElementsAre(abc));
  EXPECT_THAT(qwen2.tok->Encode("abc", false), ElementsAre(v.Id("a"), v.Id("b"), v.Id("c")));
}

TEST(BpeTokenizerTest, BosFollowsThePreTokenizerAndTheFlag) {
  BpeVocab v;
  const int32_t bot = v.Add("<|begin_of_text|>", kTokenTypeControl);
  const int32_t eot = v.Add("<|eot_id|>", kTokenTypeControl);
  const int32_t im_end = v.Add("<|im_end|>", kTokenTypeControl);
  GgufWriter w = v.Writer("llama-bpe");
  w.SetU32("tokenizer.ggml.bos_token_id", bot);
  w.SetU32("tokenizer.ggml.eos_token_id", eot);
  Loaded llama3 = MustLoad(w);
  ASSERT_TRUE(llama3.tok);
  EXPECT_THAT(llama3.tok->Encode("a", true), ElementsAre(bot, v.Id("a")));
  EXPECT_TRUE(llama3.tok->IsEog(eot));
  EXPECT_TRUE(llama3.tok->IsEog(im_end));  // detected by its text, as llama.cpp does.
  EXPECT_FALSE(llama3.tok->IsEog(bot));

  GgufWriter w2 = v.Writer("qwen2");
  w2.SetU32("tokenizer.ggml.bos_token_id", bot);
  w2.SetU32("tokenizer.ggml.eos_token_id", eot);
  Loaded qwen2 = MustLoad(w2);
  ASSERT_TRUE(qwen2.tok);
  EXPECT_THAT(qwen2.tok->Encode("a", true), ElementsAre(v.Id("a")));
  w2.SetBool("tokenizer.ggml.add_bos_token", true);
  Loaded qwen2_bos = MustLoad(w2);
  ASSERT_TRUE(qwen2_bos.tok);
  EXPECT_THAT(qwen2_bos.tok->Encode("a", true), ElementsAre(bot, v.Id("a")));
}

TEST(BpeTokenizerTest, ControlTokenTextIsNotParsed) {
  BpeVocab v;
  v.Add("<|eot_id|>", kTokenTypeControl);
  Loaded l = MustLoad(v.Writer("llama-bpe"));
  ASSERT_TRUE(l.tok);
  // parse_special = false: the text of a control token is ordinary text.
  EXPECT_EQ(l.tok->Encode("<|eot_id|>", false).size(), 10u);
}

TEST(BpeTokenizerTest, RoundTripsText) {
  BpeVocab v;
  v.Merge(" ", "t");
  v.Merge("h", "e");
  v.Merge(" t", "he");
  // Without a bos_token_id llama.cpp's BPE BOS is id 11, the byte-level "\v".
  const int32_t bot = v.Add("<|begin_of_text|>", kTokenTypeControl);
  for (const char* pre : {"llama-bpe", "qwen2", "qwen35", "gpt-2", "mpt", "default", "falcon",
                          "starcoder", "command-r", "deepseek-llm", "deepseek-coder"}) {
    GgufWriter w = v.Writer(pre);
    w.SetU32("tokenizer.ggml.bos_token_id", bot);
    Loaded l = MustLoad(w);
    ASSERT_TRUE(l.tok);
    for (const std::string text :
         {"the cat's 12345 tokens", "  spaces   and\ttabs\n\nnewlines\r\n", "naïve café, Ünïcödé",
          "你好，世界", "emoji 😀👍🏽 done", "x=a[i]+b*(c-1); // code", "", " "}) {
      EXPECT_EQ(l.tok->Decode(l.tok->Encode(text, true)), text) << pre << ": " << text;
    }
  }
}

// gemma4: SentencePiece-style BPE on raw UTF-8 (worked out by hand from llama.cpp's rules):
// spaces become U+2581, symbols are characters, a character that is no token falls back to
// its <0xXX> byte tokens, and a run of newlines that is a token is taken whole.
TEST(BpeTokenizerTest, Gemma4IsSentencePieceStyleBpe) {
  const std::string sp = "\u2581";
  std::vector<std::string> tokens = {"<pad>",   "<eos>",  "<bos>",  sp,   "h",    "i", sp + "h",
                                     sp + "hi", "<0xC3>", "<0xA9>", "\n", "\n\n", "a"};
  std::vector<int32_t> types(tokens.size(), kTokenTypeNormal);
  types[0] = types[1] = types[2] = kTokenTypeControl;
  types[8] = types[9] = kTokenTypeByte;
  GgufWriter w;
  w.SetString("tokenizer.ggml.model", "gemma4");
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetI32Array("tokenizer.ggml.token_type", types);
  w.SetStringArray("tokenizer.ggml.merges", {sp + " h", sp + "h i", "\n \n"});
  w.SetU32("tokenizer.ggml.bos_token_id", 2);
  w.SetU32("tokenizer.ggml.eos_token_id", 1);
  // As llama.cpp, gemma4 adds BOS even when the file says not to.
  w.SetBool("tokenizer.ggml.add_bos_token", false);
  Loaded l = MustLoad(w);
  ASSERT_TRUE(l.tok);
  // " hi é": ▁hi, then ▁ alone, then é as its two bytes.
  EXPECT_THAT(l.tok->Encode(" hi \u00e9", /*add_special=*/true), ElementsAre(2, 7, 3, 8, 9));
  // "\n\n\n" is one newline word: not a token, so it merges (\n\n then \n).
  EXPECT_THAT(l.tok->Encode("a\n\na\n\n\n", false), ElementsAre(12, 11, 12, 11, 10));
  EXPECT_EQ(l.tok->TokenToPiece(7), " hi");
  EXPECT_EQ(l.tok->TokenToPiece(8), "\xC3");
  EXPECT_EQ(l.tok->Decode(l.tok->Encode(" hi \u00e9 a\n", true)), " hi \u00e9 a\n");
  // A gpt2 vocabulary naming the gemma4 pre-tokenizer is the same tokenizer.
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.SetString("tokenizer.ggml.pre", "gemma4");
  Loaded g = MustLoad(w);
  ASSERT_TRUE(g.tok);
  EXPECT_THAT(g.tok->Encode(" hi \u00e9", false), ElementsAre(7, 3, 8, 9));
}

TEST(BpeTokenizerTest, MalformedUtf8BecomesReplacementCharacters) {
  BpeVocab v;
  Loaded l = MustLoad(v.Writer("llama-bpe"));
  ASSERT_TRUE(l.tok);
  EXPECT_EQ(l.tok->Decode(l.tok->Encode("a\xC3(b\x80", false)), "a\uFFFD(b\uFFFD");
}

TEST(BpeTokenizerTest, RejectsUnknownPreTokenizerAndMissingMerges) {
  BpeVocab v;
  Loaded l;
  auto bad = LoadFrom(v.Writer("mystery-pre"), &l);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("mystery-pre"));
  EXPECT_THAT(bad.status().message(), HasSubstr("tokenizer.ggml.pre"));

  GgufWriter w;
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.SetStringArray("tokenizer.ggml.tokens", v.tokens);
  auto no_merges = LoadFrom(w, &l);
  ASSERT_FALSE(no_merges.ok());
  EXPECT_THAT(no_merges.status().message(), HasSubstr("tokenizer.ggml.merges"));
}

// ---- Unicode helpers ---------------------------------------------------------------------

TEST(UnicodeTest, DecodesLikeLlamaCpp) {
  EXPECT_THAT(DecodeUtf8Lenient("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"),
              ElementsAre('a', 0xE9, 0x20AC, 0x1F600));
  // Each bad lead or truncated sequence costs one byte.
  EXPECT_THAT(DecodeUtf8Lenient("\xC3(\x80\xE2\x82"),
              ElementsAre(0xFFFD, '(', 0xFFFD, 0xFFFD, 0xFFFD));
  EXPECT_THAT(DecodeUtf8Lenient("\xFF"), ElementsAre(0xFFFD));
  std::string s;
  for (uint32_t c : {0x24u, 0xA2u, 0x20ACu, 0x10348u}) AppendUtf8(c, &s);
  EXPECT_EQ(s, "$\xC2\xA2\xE2\x82\xAC\xF0\x90\x8D\x88");
}

TEST(UnicodeTest, Classes) {
  EXPECT_EQ(GetCodepointClass('a'), CodepointClass::kLetter);
  EXPECT_EQ(GetCodepointClass('7'), CodepointClass::kNumber);
  EXPECT_EQ(GetCodepointClass('!'), CodepointClass::kPunctuation);
  EXPECT_EQ(GetCodepointClass('$'), CodepointClass::kSymbol);
  EXPECT_EQ(GetCodepointClass(' '), CodepointClass::kSeparator);
  EXPECT_EQ(GetCodepointClass('\n'), CodepointClass::kControl);
  EXPECT_EQ(GetCodepointClass(0xE9), CodepointClass::kLetter);     // é
  EXPECT_EQ(GetCodepointClass(0x4F60), CodepointClass::kLetter);   // 你
  EXPECT_EQ(GetCodepointClass(0x0663), CodepointClass::kNumber);   // Arabic-Indic 3
  EXPECT_EQ(GetCodepointClass(0x0301), CodepointClass::kMark);     // combining acute
  EXPECT_EQ(GetCodepointClass(0x1F600), CodepointClass::kSymbol);  // 😀
  EXPECT_EQ(GetCodepointClass(0x0378), CodepointClass::kUndefined);
  EXPECT_EQ(GetCodepointClass(0x110000), CodepointClass::kUndefined);
  EXPECT_TRUE(IsWhitespace(' '));
  EXPECT_TRUE(IsWhitespace(0x3000));
  EXPECT_TRUE(IsWhitespace(0x85));
  EXPECT_FALSE(IsWhitespace(0x200B));  // zero-width space is not White_Space.
}

TEST(UnicodeTest, ByteLevelMapping) {
  EXPECT_EQ(ByteToUnicode('A'), static_cast<uint32_t>('A'));
  EXPECT_EQ(ByteToUnicode(' '), 0x120u);   // Ġ
  EXPECT_EQ(ByteToUnicode('\n'), 0x10Au);  // Ċ
  for (int b = 0; b < 256; ++b) EXPECT_EQ(UnicodeToByte(ByteToUnicode(b)), b);
  EXPECT_EQ(UnicodeToByte(0x2581), -1);
}

// ---- The real stories260K vocabulary ---------------------------------------------------

TEST(Stories260KTest, MatchesLlamaCpp) {
  const std::string path = DemoModelPath();
  auto file = GgufFile::Open(path);
  if (!file.ok()) GTEST_SKIP() << "stories260K.gguf not available: " << file.status();
  auto tok = Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_THAT((*tok)->Encode("Once upon a time", true), ElementsAre(1, 403, 407, 261, 378));
  EXPECT_EQ((*tok)->n_vocab(), 512);
  EXPECT_EQ((*tok)->bos(), 1);
  EXPECT_EQ((*tok)->eos(), 2);
  for (const std::string text :
       {"Once upon a time, there was a little girl named Lily.", "Zoë ate 12 crêpes! 🍓", ""}) {
    EXPECT_EQ((*tok)->Decode((*tok)->Encode(text, true)), text);
  }
}

// parse_special: a control token's text (BOS "<s>", EOS "</s>") is that token, as in a
// rendered chat prompt; without it the same text is plain text (llama.cpp's two modes).
TEST(Stories260KTest, ParseSpecialCutsControlTokens) {
  auto file = GgufFile::Open(DemoModelPath());
  if (!file.ok()) GTEST_SKIP() << "stories260K.gguf not available: " << file.status();
  auto tok = *Tokenizer::FromGguf(**file);
  const std::vector<int32_t> with =
      tok->Encode("<s>Once upon a time</s>", /*add_special=*/false, /*parse_special=*/true);
  EXPECT_THAT(with, ElementsAre(1, 403, 407, 261, 378, 2));
  const std::vector<int32_t> without = tok->Encode("<s>Once upon a time</s>", false);
  EXPECT_EQ(std::count(without.begin(), without.end(), 1), 0);
  EXPECT_EQ(std::count(without.begin(), without.end(), 2), 0);
  EXPECT_EQ(tok->Decode(without), "<s>Once upon a time</s>");
}

}  // namespace
}  // namespace tg
