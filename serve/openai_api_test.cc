// The request parsing of tg-server: what ParseCompletion accepts the sampler accepts too (a
// value it refuses would fail every request decoded in the same step), numbers past int64 are
// refused naming the value, deep nesting is refused before parsing, and randomly mutated
// bodies give a Status or a request within bounds, never a crash or an exception. Usage
// carries prompt_tokens_details.cached_tokens.
#include "serve/openai_api.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace tg::serve {
namespace {

constexpr int64_t kMaxNew = 512;

absl::StatusOr<CompletionParams> Parse(const std::string& body, bool chat = false) {
  absl::StatusOr<Json> j = ParseBody(body);
  if (!j.ok()) return j.status();
  return ParseCompletion(*j, chat, kMaxNew);
}

// The checks the SAMPLE op makes of its parameters (core/shape_rules.cc), and max_tokens's.
void ExpectWithinBounds(const CompletionParams& p, const std::string& body) {
  EXPECT_GE(p.max_tokens, 1) << body;
  EXPECT_LE(p.max_tokens, kMaxNew) << body;
  if (!p.sampling.has_value()) return;
  const SampleParams& s = p.sampling->sample;
  EXPECT_TRUE(std::isfinite(s.temperature) && s.temperature >= 0 && s.temperature <= 2) << body;
  EXPECT_GE(s.top_k, 0) << body;
  EXPECT_TRUE(s.top_p >= 0 && s.top_p <= 1) << body;
  EXPECT_TRUE(s.min_p >= 0 && s.min_p <= 1) << body;
  EXPECT_TRUE(std::isfinite(s.repeat_penalty) && s.repeat_penalty > 0) << body;
}

TEST(OpenAiApiTest, SamplingValuesTheSamplerRefusesAreRefusedHere) {
  for (const char* body :
       {R"({"prompt": "x", "top_k": 4294967295})", R"({"prompt": "x", "top_k": 2147483648})",
        R"({"prompt": "x", "top_k": -1})", R"({"prompt": "x", "repeat_penalty": 0})",
        R"({"prompt": "x", "repeat_penalty": -1})", R"({"prompt": "x", "top_p": 1.5})"}) {
    absl::StatusOr<CompletionParams> p = Parse(body);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << body;
  }
  EXPECT_EQ(Parse(R"({"prompt": "x", "top_k": 4294967295})").status().message(),
            "'top_k' 4294967295 outside [0, 2147483647]");
  absl::StatusOr<CompletionParams> p =
      Parse(R"({"prompt": "x", "top_k": 2147483647, "temperature": 1})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->sampling->sample.top_k, 2147483647);
}

TEST(OpenAiApiTest, IntegersPastInt64AreRefusedNamingTheValue) {
  EXPECT_EQ(Parse(R"({"prompt": "x", "max_tokens": 18446744073709551615})").status().message(),
            "'max_tokens' 18446744073709551615 outside [1, 512] (the context size)");
  EXPECT_EQ(Parse(R"({"prompt": "x", "max_tokens": -1})").status().message(),
            "'max_tokens' -1 outside [1, 512] (the context size)");
  absl::StatusOr<CompletionParams> p =
      Parse(R"({"prompt": "x", "temperature": 1, "seed": 18446744073709551615})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->sampling->sample.seed, std::numeric_limits<uint64_t>::max());
}

TEST(OpenAiApiTest, DeepNestingIsRefusedBeforeParsing) {
  const int deep = 1000000;
  const std::string body = R"({"messages": [{"role": "user", "content": )" +
                           std::string(deep, '[') + std::string(deep, ']') + "}]}";
  EXPECT_EQ(ParseBody(body).status().message(),
            "the body nests arrays and objects more than 64 levels deep");
  // Brackets inside strings (escaped quotes too) are text, not nesting.
  const std::string text = R"({"prompt": ")" + std::string(1000, '[') + R"(\"[[[", "a": [[1]]})";
  EXPECT_TRUE(ParseBody(text).ok());
  std::string at_limit = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(ParseBody(at_limit).ok());
  EXPECT_FALSE(ParseBody("[" + at_limit + "]").ok());
  EXPECT_EQ(ParseBody("{bad").status().message(), "the body is not valid JSON");
}

TEST(OpenAiApiTest, OptionalBoolNamesAWrongType) {
  const Json body = Json::parse(R"({"a": true, "b": "yes", "c": null})");
  EXPECT_EQ(*OptionalBool(body, "a", false), true);
  EXPECT_EQ(OptionalBool(body, "b", false).status().message(), "'b' must be true or false");
  EXPECT_EQ(*OptionalBool(body, "c", true), true);
  EXPECT_EQ(*OptionalBool(body, "missing", false), false);
}

TEST(OpenAiApiTest, DumpWritesBytesThatAreNotUtf8AsReplacementCharacters) {
  // A character cut by max_tokens: nlohmann's dump() would throw.
  EXPECT_EQ(Dump(Json{{"text", "ab\xe4\xb8"}}), "{\"text\":\"ab\xef\xbf\xbd\"}");
}

TEST(OpenAiApiTest, UsageCarriesTheCachedPromptTokensWholeAndStreamed) {
  CompletionParams p;
  const Usage usage{.prompt_tokens = 12, .completion_tokens = 5, .cached_tokens = 11};
  const Json whole = CompletionResponse(p, "cmpl-1", 1, "m", "text", "length", usage);
  const Json chunk = UsageChunk(p, "cmpl-1", 1, "m", usage);
  for (const Json& j : {whole, chunk}) {
    EXPECT_EQ(j["usage"]["prompt_tokens"], 12) << j.dump();
    EXPECT_EQ(j["usage"]["completion_tokens"], 5) << j.dump();
    EXPECT_EQ(j["usage"]["total_tokens"], 17) << j.dump();
    EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 11) << j.dump();
  }
  const Json none = CompletionResponse(p, "cmpl-2", 1, "m", "", "stop", {3, 1});
  EXPECT_EQ(none["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

// Random mutations of valid bodies: byte flips, cuts, insertions, fields set to values of
// every type and size. Each parse gives a Status or a request within bounds.
class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  std::string Body() {
    static const char* const kSeeds[] = {
        R"({"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0.8, "seed": 1,
            "top_k": 40, "top_p": 0.9, "min_p": 0.05, "repeat_penalty": 1.1, "stop": ["\n"],
            "stream": true, "stream_options": {"include_usage": true}, "n": 1})",
        R"({"messages": [{"role": "system", "content": "Be brief."},
                         {"role": "user", "content": "Hi"}], "max_completion_tokens": 4})",
        R"({"prompt": "x", "n_predict": 3, "presence_penalty": 0, "frequency_penalty": 0})"};
    Json j = Json::parse(kSeeds[Pick(3)]);
    for (int n = 1 + Pick(3); n > 0; --n) MutateJson(j);
    std::string s = j.dump();
    if (Pick(3) == 0) MutateBytes(s);
    return s;
  }

 private:
  int Pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }

  Json Value(int depth = 0) {
    switch (Pick(depth > 3 ? 9 : 12)) {
      case 0:
        return nullptr;
      case 1:
        return Pick(2) == 0;
      case 2: {
        static const int64_t kInts[] = {0,
                                        1,
                                        -1,
                                        2,
                                        7,
                                        64,
                                        511,
                                        512,
                                        513,
                                        1 << 20,
                                        std::numeric_limits<int32_t>::max(),
                                        int64_t{std::numeric_limits<int32_t>::max()} + 1,
                                        std::numeric_limits<int64_t>::max(),
                                        std::numeric_limits<int64_t>::min()};
        return kInts[Pick(std::size(kInts))];
      }
      case 3:
        return std::numeric_limits<uint64_t>::max() - Pick(2);
      case 4: {
        static const double kFloats[] = {0.0,    -0.0, 0.5,   1.0,    1.0000001, 2.0,  2.5, 1e-45,
                                         5e-324, 1e38, 1e308, -1e308, 0.05,      10.0, 10.5};
        return kFloats[Pick(std::size(kFloats))];
      }
      case 5:
        return "";
      case 6:
        return "\xc3\xa9\xf0\x9f\x98\x80 \xe4\xb8\xad <|im_start|> </s> \\u0000";
      case 7:
        return std::string(1 + Pick(5000), 'a' + Pick(26));
      case 8:
        return "Once upon a time";
      case 9: {
        Json a = Json::array();
        for (int n = Pick(4); n > 0; --n) a.push_back(Value(depth + 1));
        return a;
      }
      case 10: {
        Json o = Json::object();
        for (int n = Pick(4); n > 0; --n) o[Key()] = Value(depth + 1);
        return o;
      }
      default: {
        Json deep = Json::array();
        for (int n = Pick(100); n > 0; --n) deep = Json::array({deep});
        return deep;
      }
    }
  }

  std::string Key() {
    static const char* const kKeys[] = {"prompt",
                                        "messages",
                                        "max_tokens",
                                        "max_completion_tokens",
                                        "n_predict",
                                        "temperature",
                                        "top_k",
                                        "top_p",
                                        "min_p",
                                        "repeat_penalty",
                                        "presence_penalty",
                                        "frequency_penalty",
                                        "seed",
                                        "stop",
                                        "stream",
                                        "stream_options",
                                        "include_usage",
                                        "n",
                                        "model",
                                        "role",
                                        "content",
                                        "unknown"};
    return kKeys[Pick(std::size(kKeys))];
  }

  void MutateJson(Json& j) {
    Json* target = &j;
    // Down into a random object or array now and then (messages, stream_options).
    while (Pick(3) == 0 && (target->is_object() || target->is_array()) && !target->empty()) {
      auto it = target->begin();
      std::advance(it, Pick(static_cast<int>(target->size())));
      target = &*it;
    }
    if (target->is_object()) {
      if (Pick(4) == 0 && !target->empty()) {
        auto it = target->begin();
        std::advance(it, Pick(static_cast<int>(target->size())));
        target->erase(it);
      } else {
        (*target)[Key()] = Value();
      }
    } else {
      *target = Value();
    }
  }

  void MutateBytes(std::string& s) {
    if (s.empty()) return;
    switch (Pick(4)) {
      case 0:
        s[Pick(s.size())] ^= static_cast<char>(1 << Pick(8));
        break;
      case 1:
        s.resize(Pick(s.size()));
        break;
      case 2:
        s.insert(Pick(s.size()), 1, static_cast<char>(Pick(256)));
        break;
      default:
        s.insert(Pick(s.size()), std::string(Pick(200), "[{\"1e999"[Pick(8)]));
    }
  }

  std::mt19937_64 rng_;
};

TEST(OpenAiApiTest, MutatedBodiesGiveAStatusOrARequestWithinBounds) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "mutation seed " << seed);
  Mutator m(seed);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::string body = m.Body();
    for (bool chat : {false, true}) {
      absl::StatusOr<CompletionParams> p = Parse(body, chat);
      if (!p.ok()) {
        EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << body;
        continue;
      }
      ++accepted;
      ExpectWithinBounds(*p, body);
    }
    if (HasFailure()) break;
  }
  EXPECT_GT(accepted, 100);  // the mutations leave enough bodies valid to test the bounds.
}

}  // namespace
}  // namespace tg::serve
