// The request parsing of tg-server: what ParseCompletion accepts the sampler accepts too (a
// value it refuses would fail every request decoded in the same step), numbers past int64 are
// refused naming the value, deep nesting is refused before parsing, and randomly mutated
// bodies give a Status or a request within bounds, never a crash or an exception. Usage
// carries prompt_tokens_details.cached_tokens. Log-probabilities: completions' `logprobs: N`
// (and llama-server's `n_probs`) and chat's `logprobs` + `top_logprobs` parse within [0, 20],
// refused naming the field otherwise, and are written in OpenAI's shapes, whole and streamed.
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
  EXPECT_TRUE(p.logprobs >= -1 && p.logprobs <= kMaxTopLogprobs) << body;
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

// llama-server's timings: counts from the usage, rates from the times; none without times.
TEST(OpenAiApiTest, TimingsFollowTheUsageAndTheTimes) {
  const Usage usage{.prompt_tokens = 12,
                    .completion_tokens = 5,
                    .cached_tokens = 10,
                    .prompt_ms = 4.0,
                    .predicted_ms = 8.0};
  Json r = Json::object();
  AddTimings(usage, &r);
  const Json& t = r["timings"];
  EXPECT_EQ(t["cache_n"], 10);
  EXPECT_EQ(t["prompt_n"], 2);
  EXPECT_DOUBLE_EQ(t["prompt_ms"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(t["prompt_per_token_ms"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(t["prompt_per_second"].get<double>(), 500.0);
  EXPECT_EQ(t["predicted_n"], 5);
  EXPECT_DOUBLE_EQ(t["predicted_per_token_ms"].get<double>(), 2.0);  // 4 intervals.
  EXPECT_DOUBLE_EQ(t["predicted_per_second"].get<double>(), 500.0);
  Json none = Json::object();
  AddTimings(Usage{.prompt_tokens = 3}, &none);
  EXPECT_FALSE(none.contains("timings"));
  CompletionParams p;
  EXPECT_EQ(CompletionResponse(p, "cmpl-1", 1, "m", "x", "stop", usage)["timings"]["cache_n"], 10);
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

TEST(OpenAiApiTest, LogprobsParseWithinLimitsAndBadValuesAreRefused) {
  struct Case {
    const char* body;
    bool chat;
    int64_t logprobs;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"prompt": "x"})", false, -1},
           {R"({"prompt": "x", "logprobs": 5})", false, 5},
           {R"({"prompt": "x", "logprobs": 0})", false, 0},
           {R"({"prompt": "x", "logprobs": null})", false, -1},
           {R"({"prompt": "x", "n_probs": 3})", false, 3},
           {R"({"prompt": "x", "logprobs": 20})", false, 20},
           {R"({"messages": [{"role": "user"}]})", true, -1},
           {R"({"messages": [{"role": "user"}], "logprobs": false})", true, -1},
           {R"({"messages": [{"role": "user"}], "logprobs": true})", true, 0},
           {R"({"messages": [{"role": "user"}], "logprobs": true, "top_logprobs": 3})", true, 3}}) {
    absl::StatusOr<CompletionParams> p = Parse(c.body, c.chat);
    ASSERT_TRUE(p.ok()) << c.body << ": " << p.status();
    EXPECT_EQ(p->logprobs, c.logprobs) << c.body;
  }
  struct Bad {
    const char* body;
    bool chat;
    const char* message;
  };
  for (const Bad& b : std::vector<Bad>{
           {R"({"prompt": "x", "logprobs": 21})", false, "'logprobs' 21 outside [0, 20]"},
           {R"({"prompt": "x", "logprobs": -1})", false, "'logprobs' -1 outside [0, 20]"},
           {R"({"prompt": "x", "logprobs": "x"})", false,
            "'logprobs' must be an integer in [0, 20]"},
           {R"({"prompt": "x", "n_probs": 2.5})", false, "'n_probs' must be an integer in [0, 20]"},
           {R"({"messages": [{"role": "user"}], "logprobs": true, "top_logprobs": 21})", true,
            "'top_logprobs' 21 outside [0, 20]"},
           {R"({"messages": [{"role": "user"}], "logprobs": "x"})", true,
            "'logprobs' must be true or false"},
           {R"({"messages": [{"role": "user"}], "top_logprobs": 2})", true,
            "'top_logprobs' needs 'logprobs': true (or leave top_logprobs out)"},
           {R"({"messages": [{"role": "user"}], "logprobs": false, "top_logprobs": 2})", true,
            "'top_logprobs' needs 'logprobs': true (or leave top_logprobs out)"}}) {
    absl::StatusOr<CompletionParams> p = Parse(b.body, b.chat);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << b.body;
    EXPECT_EQ(p.status().message(), b.message) << b.body;
  }
}

const std::vector<LogprobEntry> kEntries = {
    {"Once", -0.5f, {{"Once", -0.5f}, {"A", -1.25f}, {"A", -3.0f}}},
    {" up\xc3\xa9", -0.125f, {{" the", -0.0625f}, {" up\xc3\xa9", -0.125f}}}};

TEST(OpenAiApiTest, CompletionLogprobsHaveOpenAisLegacyShape) {
  CompletionParams p;
  p.logprobs = 2;
  const Json whole = CompletionResponse(p, "c", 1, "m", "Once up\xc3\xa9", "length", {}, kEntries);
  const Json want = Json::parse(R"({
      "tokens": ["Once", " upé"], "token_logprobs": [-0.5, -0.125],
      "top_logprobs": [{"Once": -0.5, "A": -1.25}, {" the": -0.0625, " upé": -0.125}],
      "text_offset": [0, 4]})");
  EXPECT_EQ(whole["choices"][0]["logprobs"], want) << whole.dump();
  EXPECT_EQ(whole["choices"][0]["text"], "Once up\xc3\xa9");
  // Streamed: the chunk's offsets start where the text sent before it ends.
  const Json chunk = StreamChunk(p, "c", 1, "m", " up\xc3\xa9", {}, {kEntries[1]}, 4);
  EXPECT_EQ(chunk["choices"][0]["logprobs"]["text_offset"], Json::array({4})) << chunk.dump();
  EXPECT_EQ(chunk["choices"][0]["logprobs"]["tokens"], Json::array({" up\xc3\xa9"}));
  EXPECT_TRUE(StreamChunk(p, "c", 1, "m", "", "stop")["choices"][0]["logprobs"].is_null());
  // N = 0: the tokens' own log-probabilities, no alternatives.
  p.logprobs = 0;
  std::vector<LogprobEntry> bare = kEntries;
  for (LogprobEntry& e : bare) e.top.clear();
  const Json zero = CompletionResponse(p, "c", 1, "m", "Once up\xc3\xa9", "stop", {}, bare);
  EXPECT_EQ(zero["choices"][0]["logprobs"]["top_logprobs"], Json::parse("[{}, {}]"));
  EXPECT_EQ(zero["choices"][0]["logprobs"]["token_logprobs"], Json::parse("[-0.5, -0.125]"));
  // Not asked for: null, as OpenAI writes it.
  p.logprobs = -1;
  const Json none = CompletionResponse(p, "c", 1, "m", "x", "stop", {});
  ASSERT_TRUE(none["choices"][0].contains("logprobs"));
  EXPECT_TRUE(none["choices"][0]["logprobs"].is_null());
}

TEST(OpenAiApiTest, ChatLogprobsHaveOpenAisShape) {
  CompletionParams p;
  p.chat = true;
  p.logprobs = 2;
  const Json whole = CompletionResponse(p, "c", 1, "m", "Once up\xc3\xa9", "stop", {}, kEntries);
  const Json want = Json::parse(R"({"content": [
      {"token": "Once", "logprob": -0.5, "bytes": [79, 110, 99, 101],
       "top_logprobs": [{"token": "Once", "logprob": -0.5, "bytes": [79, 110, 99, 101]},
                        {"token": "A", "logprob": -1.25, "bytes": [65]},
                        {"token": "A", "logprob": -3.0, "bytes": [65]}]},
      {"token": " upé", "logprob": -0.125, "bytes": [32, 117, 112, 195, 169],
       "top_logprobs": [{"token": " the", "logprob": -0.0625, "bytes": [32, 116, 104, 101]},
                        {"token": " upé", "logprob": -0.125, "bytes": [32, 117, 112, 195, 169]}]}
      ]})");
  EXPECT_EQ(whole["choices"][0]["logprobs"], want) << whole.dump();
  const Json chunk = StreamChunk(p, "c", 1, "m", "Once", {}, {kEntries[0]});
  EXPECT_EQ(chunk["choices"][0]["delta"]["content"], "Once");
  EXPECT_EQ(chunk["choices"][0]["logprobs"]["content"].size(), 1u) << chunk.dump();
  EXPECT_EQ(chunk["choices"][0]["logprobs"]["content"][0]["token"], "Once");
  EXPECT_TRUE(StreamChunk(p, "c", 1, "m", "", "stop")["choices"][0]["logprobs"].is_null());
  p.logprobs = 0;
  std::vector<LogprobEntry> bare = {kEntries[0]};
  bare[0].top.clear();
  const Json zero = CompletionResponse(p, "c", 1, "m", "Once", "stop", {}, bare);
  EXPECT_EQ(zero["choices"][0]["logprobs"]["content"][0]["top_logprobs"], Json::array());
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
            "stream": true, "stream_options": {"include_usage": true}, "n": 1, "logprobs": 3})",
        R"({"messages": [{"role": "system", "content": "Be brief."},
                         {"role": "user", "content": "Hi"}], "max_completion_tokens": 4,
            "logprobs": true, "top_logprobs": 2})",
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
