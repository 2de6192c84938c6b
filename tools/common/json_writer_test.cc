// JsonWriter and JsonQuote: structure and separators, numbers, and strings that decode back
// to what was written (checked by a strict decoder written here from RFC 8259), with invalid
// UTF-8 replaced by U+FFFD.
#include "tools/common/json_writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>

#include "absl/strings/string_view.h"
#include "models/unicode.h"

namespace tg {
namespace {

// Decodes one JSON string literal (RFC 8259 section 7); nullopt when it is not one: raw
// control characters, unknown escapes, bad \u digits, unpaired surrogates, trailing bytes.
std::optional<std::string> DecodeJsonString(const std::string& q) {
  if (q.size() < 2 || q.front() != '"' || q.back() != '"') return std::nullopt;
  std::string out;
  for (size_t i = 1; i + 1 < q.size(); ++i) {
    const auto c = static_cast<unsigned char>(q[i]);
    if (c < 0x20 || c == '"') return std::nullopt;
    if (c != '\\') {
      out.push_back(static_cast<char>(c));
      continue;
    }
    if (++i + 1 >= q.size()) return std::nullopt;
    // The one-character escapes, then \uXXXX.
    constexpr absl::string_view kEscapes = "\"\\/bfnrt";
    constexpr absl::string_view kDecoded = "\"\\/\b\f\n\r\t";
    if (const size_t k = kEscapes.find(q[i]); k != absl::string_view::npos) {
      out.push_back(kDecoded[k]);
      continue;
    }
    if (q[i] != 'u' || i + 5 >= q.size()) return std::nullopt;
    uint32_t cp = 0;
    for (int k = 1; k <= 4; ++k) {
      const char h = q[i + k];
      const int v = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
      if (v < 0) return std::nullopt;
      cp = cp * 16 + v;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) return std::nullopt;  // JsonQuote never needs them.
    AppendUtf8(cp, &out);
    i += 4;
  }
  return out;
}

TEST(JsonWriterTest, NestedContainersGetCommasAndColons) {
  JsonWriter w;
  w.BeginObject().Key("a").Int(1).Key("list").BeginArray().Int(-2).String("x").BeginObject();
  w.EndObject().BeginArray().EndArray().EndArray().Key("ok").Bool(true).Key("no").Bool(false);
  w.EndObject();
  EXPECT_EQ(w.str(), R"({"a":1,"list":[-2,"x",{},[]],"ok":true,"no":false})");
}

TEST(JsonWriterTest, TopLevelArrayOfObjects) {
  JsonWriter w;
  w.BeginArray();
  for (int i = 0; i < 3; ++i) w.BeginObject().Key("i").Int(i).EndObject();
  w.EndArray();
  EXPECT_EQ(w.str(), R"([{"i":0},{"i":1},{"i":2}])");
}

TEST(JsonWriterTest, DoublesKeepNineDigitsAndNonFiniteIsNull) {
  JsonWriter w;
  w.BeginArray().Double(0.1).Double(-1.5e-7).Double(3).Double(1.0 / 3).Double(std::nan(""));
  w.Double(std::numeric_limits<double>::infinity()).EndArray();
  EXPECT_EQ(w.str(), "[0.1,-1.5e-07,3,0.333333333,null,null]");
  // %.9g round-trips a float exactly.
  const float f = 0.1f;
  JsonWriter one;
  one.Double(f);
  EXPECT_EQ(std::stof(one.str()), f);
}

TEST(JsonWriterTest, IntegerExtremes) {
  JsonWriter w;
  w.BeginArray().Int(std::numeric_limits<int64_t>::min()).Int(std::numeric_limits<int64_t>::max());
  w.EndArray();
  EXPECT_EQ(w.str(), "[-9223372036854775808,9223372036854775807]");
}

TEST(JsonQuoteTest, EveryAsciiByteDecodesBack) {
  for (int c = 0; c < 0x80; ++c) {
    const std::string s(1, static_cast<char>(c));
    const std::optional<std::string> back = DecodeJsonString(JsonQuote(s));
    ASSERT_TRUE(back.has_value()) << "byte " << c << ": " << JsonQuote(s);
    EXPECT_EQ(*back, s) << "byte " << c;
  }
}

TEST(JsonQuoteTest, RandomValidUtf8DecodesBack) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> plane(0, 3);
  for (int round = 0; round < 2000; ++round) {
    std::string s;
    const int n = static_cast<int>(rng() % 12);
    for (int k = 0; k < n; ++k) {
      const uint32_t limits[] = {0x80, 0x800, 0x10000, 0x110000};
      uint32_t cp = rng() % limits[plane(rng)];
      if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0x20AC;  // surrogates are not characters.
      AppendUtf8(cp, &s);
    }
    const std::optional<std::string> back = DecodeJsonString(JsonQuote(s));
    ASSERT_TRUE(back.has_value()) << JsonQuote(s);
    EXPECT_EQ(*back, s);
  }
}

TEST(JsonQuoteTest, InvalidUtf8BecomesReplacementCharacters) {
  const std::string fffd = "\xEF\xBF\xBD";
  struct Case {
    std::string in, want;
  };
  const Case cases[] = {
      {"\xFF", fffd},                                   // never valid.
      {"a\x80z", "a" + fffd + "z"},                     // lone continuation byte.
      {"\xE2\x82", fffd + fffd},                        // truncated 3-byte sequence.
      {"\xC3\xA9\xC3", "\xC3\xA9" + fffd},              // valid, then half a character.
      {"\xF0\x9F\x98\x80!", "\xF0\x9F\x98\x80!"},       // a 4-byte emoji stays.
      {"\xED\xA0\x80", fffd + fffd + fffd},             // a UTF-16 surrogate (U+D800).
      {"\xC0\xAF", fffd + fffd},                        // overlong '/'.
      {"\xE0\x80\xAF", fffd + fffd + fffd},             // overlong '/' in three bytes.
      {"\xF4\x90\x80\x80", fffd + fffd + fffd + fffd},  // past U+10FFFF.
      {"\xED\x9F\xBF", "\xED\x9F\xBF"},                 // U+D7FF, just below the surrogates.
  };
  for (const Case& c : cases) {
    const std::optional<std::string> back = DecodeJsonString(JsonQuote(c.in));
    ASSERT_TRUE(back.has_value()) << JsonQuote(c.in);
    EXPECT_EQ(*back, c.want);
  }
}

}  // namespace
}  // namespace tg
