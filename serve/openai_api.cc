#include "serve/openai_api.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace tg::serve {
namespace {

// The first field of `names` the body has (OpenAI and llama-server spellings), or nullptr.
const Json* Field(const Json& body, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (auto it = body.find(n); it != body.end() && !it->is_null()) return &*it;
  }
  return nullptr;
}

absl::Status TypeError(const char* field, const char* expected) {
  return absl::InvalidArgumentError(absl::StrCat("'", field, "' must be ", expected));
}

// A number field within [lo, hi]; `value` unchanged when absent.
absl::Status NumberIn(const Json& body, const char* field, double lo, double hi, float* value) {
  const Json* v = Field(body, {field});
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number()) return TypeError(field, "a number");
  const double d = v->get<double>();
  if (!(d >= lo && d <= hi)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("'%s' %g outside [%g, %g]", field, d, lo, hi));
  }
  *value = static_cast<float>(d);
  return absl::OkStatus();
}

// An integer within [lo, hi] (one past INT64_MAX, as JSON allows, is out of range too).
absl::Status IntegerIn(const Json& v, const char* field, int64_t lo, int64_t hi, int64_t* value) {
  if (!v.is_number_integer()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("'%s' must be an integer in [%d, %d]", field, lo, hi));
  }
  const bool big = v.is_number_unsigned() &&
                   v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  const int64_t n = big ? std::numeric_limits<int64_t>::max() : v.get<int64_t>();
  if (big || n < lo || n > hi) {
    return absl::InvalidArgumentError(
        absl::StrFormat("'%s' %s outside [%d, %d]", field, v.dump(), lo, hi));
  }
  *value = n;
  return absl::OkStatus();
}

absl::Status ParseStop(const Json& body, std::vector<std::string>* stop) {
  const Json* v = Field(body, {"stop"});
  if (v == nullptr) return absl::OkStatus();
  if (v->is_string()) {
    stop->push_back(v->get<std::string>());
    return absl::OkStatus();
  }
  if (!v->is_array()) return TypeError("stop", "a string or an array of strings");
  for (const Json& s : *v) {
    if (!s.is_string()) return TypeError("stop", "a string or an array of strings");
    stop->push_back(s.get<std::string>());
  }
  return absl::OkStatus();
}

absl::Status ParseSampling(const Json& body, CompletionParams* p) {
  SamplingParams s;  // tg-run's defaults (llama.cpp's).
  TG_RETURN_IF_ERROR(NumberIn(body, "temperature", 0, 2, &s.sample.temperature));
  TG_RETURN_IF_ERROR(NumberIn(body, "top_p", 0, 1, &s.sample.top_p));
  TG_RETURN_IF_ERROR(NumberIn(body, "min_p", 0, 1, &s.sample.min_p));
  TG_RETURN_IF_ERROR(NumberIn(body, "repeat_penalty", 0, 10, &s.sample.repeat_penalty));
  float unused = 0;  // accepted as OpenAI's, not applied (the repetition penalty is).
  TG_RETURN_IF_ERROR(NumberIn(body, "presence_penalty", -2, 2, &unused));
  TG_RETURN_IF_ERROR(NumberIn(body, "frequency_penalty", -2, 2, &unused));
  // The sampler takes a positive penalty (a step that fails its checks fails every request
  // decoded in it, so nothing the sampler would refuse may pass here).
  if (s.sample.repeat_penalty <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "'repeat_penalty' %g must be positive (1: no penalty)", s.sample.repeat_penalty));
  }
  if (const Json* v = Field(body, {"top_k"}); v != nullptr) {
    int64_t k = 0;
    TG_RETURN_IF_ERROR(IntegerIn(*v, "top_k", 0, std::numeric_limits<int32_t>::max(), &k));
    s.sample.top_k = static_cast<int32_t>(k);
  }
  if (const Json* v = Field(body, {"seed"}); v != nullptr) {
    if (!v->is_number_integer()) return TypeError("seed", "an integer");
    s.sample.seed =
        v->is_number_unsigned() ? v->get<uint64_t>() : static_cast<uint64_t>(v->get<int64_t>());
  } else {
    s.sample.seed =
        static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  if (s.sample.temperature > 0 || s.sample.repeat_penalty != 1.0f) p->sampling = s;
  return absl::OkStatus();
}

// Completions: OpenAI's legacy `logprobs: N`, or llama-server's `n_probs: N`. Chat:
// `logprobs: true`, with `top_logprobs: N` (0 when absent; refused without logprobs).
absl::Status ParseLogprobs(const Json& body, bool chat, int64_t* n) {
  if (!chat) {
    for (const char* field : {"logprobs", "n_probs"}) {
      if (const Json* v = Field(body, {field}); v != nullptr) {
        return IntegerIn(*v, field, 0, kMaxTopLogprobs, n);
      }
    }
    return absl::OkStatus();
  }
  TG_ASSIGN_OR_RETURN(const bool on, OptionalBool(body, "logprobs", false));
  const Json* top = Field(body, {"top_logprobs"});
  if (top != nullptr && !on) {
    return absl::InvalidArgumentError(
        "'top_logprobs' needs 'logprobs': true (or leave top_logprobs out)");
  }
  if (!on) return absl::OkStatus();
  *n = 0;
  return top == nullptr ? absl::OkStatus() : IntegerIn(*top, "top_logprobs", 0, kMaxTopLogprobs, n);
}

}  // namespace

absl::StatusOr<Json> ParseBody(std::string_view body) {
  // The deepest nesting, counted outside strings: linear, and never recursive itself.
  int depth = 0;
  int deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (depth > kMaxJsonDepth) break;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  if (deepest > kMaxJsonDepth) {
    return absl::InvalidArgumentError(absl::StrCat("the body nests arrays and objects more than ",
                                                   kMaxJsonDepth, " levels deep"));
  }
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("the body is not valid JSON");
  return j;
}

absl::StatusOr<bool> OptionalBool(const Json& body, const char* field, bool absent) {
  const Json* v = Field(body, {field});
  if (v == nullptr) return absent;
  if (!v->is_boolean()) return TypeError(field, "true or false");
  return v->get<bool>();
}

std::string Dump(const Json& j) {
  return j.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

absl::StatusOr<CompletionParams> ParseCompletion(const Json& body, bool chat, int64_t max_new) {
  if (!body.is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  CompletionParams p;
  p.chat = chat;
  if (chat) {
    const Json* m = Field(body, {"messages"});
    if (m == nullptr || !m->is_array() || m->empty()) {
      return TypeError("messages", "a non-empty array of messages");
    }
    for (const Json& msg : *m) {
      if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string()) {
        return TypeError("messages", "objects with a string 'role'");
      }
    }
    p.messages = *m;
  } else {
    const Json* prompt = Field(body, {"prompt"});
    if (prompt == nullptr || !prompt->is_string()) return TypeError("prompt", "a string");
    p.prompt = prompt->get<std::string>();
  }
  p.max_tokens = chat ? max_new : 16;  // OpenAI's default for completions.
  if (const Json* v = Field(body, {"max_completion_tokens", "max_tokens", "n_predict"});
      v != nullptr) {
    if (!v->is_number_integer()) return TypeError("max_tokens", "an integer");
    if (absl::Status s = IntegerIn(*v, "max_tokens", 1, max_new, &p.max_tokens); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(s.message(), " (the context size)"));
    }
  }
  if (const Json* v = Field(body, {"n"}); v != nullptr && (!v->is_number_integer() || *v != 1)) {
    return TypeError("n", "1 (one choice per request)");
  }
  TG_RETURN_IF_ERROR(ParseSampling(body, &p));
  TG_RETURN_IF_ERROR(ParseStop(body, &p.stop));
  if (const Json* v = Field(body, {"stream"}); v != nullptr) {
    if (!v->is_boolean()) return TypeError("stream", "true or false");
    p.stream = v->get<bool>();
  }
  if (const Json* o = Field(body, {"stream_options"}); o != nullptr && o->is_object()) {
    if (const Json* v = Field(*o, {"include_usage"}); v != nullptr) {
      if (!v->is_boolean()) return TypeError("stream_options.include_usage", "true or false");
      p.include_usage = v->get<bool>();
    }
  }
  TG_RETURN_IF_ERROR(ParseLogprobs(body, chat, &p.logprobs));
  return p;
}

namespace {

Json Envelope(const CompletionParams& p, const std::string& id, int64_t created,
              const std::string& model, bool chunk) {
  return {{"id", id},
          {"object",
           p.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
          {"created", created},
          {"model", model}};
}

Json UsageJson(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

Json Bytes(const std::string& text) {
  Json b = Json::array();
  for (char c : text) b.push_back(static_cast<unsigned char>(c));
  return b;
}

}  // namespace

Json LogprobsJson(const CompletionParams& p, const std::vector<LogprobEntry>& entries,
                  int64_t text_offset) {
  if (p.logprobs < 0) return nullptr;
  if (p.chat) {
    Json content = Json::array();
    for (const LogprobEntry& e : entries) {
      Json top = Json::array();
      for (const auto& [text, logprob] : e.top) {
        top.push_back({{"token", text}, {"logprob", logprob}, {"bytes", Bytes(text)}});
      }
      content.push_back({{"token", e.text},
                         {"logprob", e.logprob},
                         {"bytes", Bytes(e.text)},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}};
  }
  Json tokens = Json::array(), token_logprobs = Json::array(), top_logprobs = Json::array(),
       offsets = Json::array();
  for (const LogprobEntry& e : entries) {
    tokens.push_back(e.text);
    token_logprobs.push_back(e.logprob);
    Json top = Json::object();
    for (const auto& [text, logprob] : e.top) {
      if (!top.contains(text)) top[text] = logprob;  // two ids, one text: the likelier.
    }
    top_logprobs.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += static_cast<int64_t>(e.text.size());
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(offsets)}};
}

Json CompletionResponse(const CompletionParams& p, const std::string& id, int64_t created,
                        const std::string& model, const std::string& text,
                        const std::string& finish_reason, const Usage& usage,
                        const std::vector<LogprobEntry>& logprobs) {
  Json r = Envelope(p, id, created, model, false);
  Json choice = {{"index", 0}};
  if (p.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = LogprobsJson(p, logprobs, 0);
  choice["finish_reason"] = finish_reason;
  r["choices"] = Json::array({choice});
  r["usage"] = UsageJson(usage);
  AddTimings(usage, &r);
  return r;
}

Json StreamChunk(const CompletionParams& p, const std::string& id, int64_t created,
                 const std::string& model, const std::string& text,
                 const std::optional<std::string>& finish_reason,
                 const std::vector<LogprobEntry>& logprobs, int64_t text_offset) {
  Json r = Envelope(p, id, created, model, true);
  Json choice = {{"index", 0}};
  if (p.chat) {
    choice["delta"] = finish_reason.has_value() ? Json::object() : Json{{"content", text}};
  } else {
    choice["text"] = text;
  }
  // The finish chunk carries no text, so no tokens.
  choice["logprobs"] =
      finish_reason.has_value() ? Json(nullptr) : LogprobsJson(p, logprobs, text_offset);
  choice["finish_reason"] = finish_reason.has_value() ? Json(*finish_reason) : Json(nullptr);
  r["choices"] = Json::array({choice});
  return r;
}

Json UsageChunk(const CompletionParams& p, const std::string& id, int64_t created,
                const std::string& model, const Usage& usage) {
  Json r = Envelope(p, id, created, model, true);
  r["choices"] = Json::array();
  r["usage"] = UsageJson(usage);
  return r;
}

void AddTimings(const Usage& u, Json* response) {
  if (u.prompt_ms < 0 || u.predicted_ms < 0) return;
  const int64_t prompt_n = u.prompt_tokens - u.cached_tokens;
  const int64_t intervals = std::max<int64_t>(u.completion_tokens - 1, 0);
  auto per_token = [](double ms, int64_t n) { return n > 0 ? ms / n : 0.0; };
  auto per_second = [](double ms, int64_t n) { return ms > 0 ? 1e3 * n / ms : 0.0; };
  (*response)["timings"] = {{"cache_n", u.cached_tokens},
                            {"prompt_n", prompt_n},
                            {"prompt_ms", u.prompt_ms},
                            {"prompt_per_token_ms", per_token(u.prompt_ms, prompt_n)},
                            {"prompt_per_second", per_second(u.prompt_ms, prompt_n)},
                            {"predicted_n", u.completion_tokens},
                            {"predicted_ms", u.predicted_ms},
                            {"predicted_per_token_ms", per_token(u.predicted_ms, intervals)},
                            {"predicted_per_second", per_second(u.predicted_ms, intervals)}};
}

Json ErrorBody(const std::string& message, const std::string& type, int code) {
  return {{"error", {{"message", message}, {"type", type}, {"code", code}}}};
}

}  // namespace tg::serve
