// The OpenAI-compatible request and response bodies of tg-server's /v1/completions and
// /v1/chat/completions, with llama-server's extra fields: parsing a request's JSON into what
// the engine needs (a wrong type or value is INVALID_ARGUMENT naming the field; unknown
// fields are ignored, as OpenAI does) and writing the responses, whole or as stream chunks.
// Pure functions; thread-safe.
#ifndef TENSORGRID_SERVE_OPENAI_API_H_
#define TENSORGRID_SERVE_OPENAI_API_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "models/llama_session.h"
#include "nlohmann/json.hpp"

namespace tg::serve {

using Json = nlohmann::ordered_json;

// The most alternatives per token a request may ask for (OpenAI's limit).
inline constexpr int64_t kMaxTopLogprobs = 20;

struct CompletionParams {
  bool chat = false;
  std::string prompt;  // /v1/completions.
  Json messages;       // /v1/chat/completions.
  int64_t max_tokens = 0;
  std::optional<SamplingParams> sampling;  // nullopt: temperature 0, greedy.
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage.
  // Alternatives per token with log-probabilities (completions' `logprobs: N` or `n_probs`,
  // chat's `logprobs: true` with `top_logprobs: N`); -1: no log-probabilities.
  int64_t logprobs = -1;
};

// One generated token's log-probabilities as a response writes them: its text (only the part
// returned when a stop string cuts it), its log-probability, and its alternatives' (text,
// log-probability), likeliest first.
struct LogprobEntry {
  std::string text;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;
};

// Arrays and objects a request body may nest (OpenAI's bodies nest a handful of levels): the
// handlers and the chat template walk a body recursively, so a deeper one is refused
// before it is parsed instead of overflowing a handler thread's stack.
inline constexpr int kMaxJsonDepth = 64;

// A request body parsed: INVALID_ARGUMENT for one that is not JSON or nests deeper than
// kMaxJsonDepth.
absl::StatusOr<Json> ParseBody(std::string_view body);
// The boolean `field` of an object body; `absent` when missing or null, INVALID_ARGUMENT
// naming the field when it is something else.
absl::StatusOr<bool> OptionalBool(const Json& body, const char* field, bool absent);
// Text as JSON, bytes that are not UTF-8 (a character cut by max_tokens) written as U+FFFD.
std::string Dump(const Json& j);

// `max_new` bounds max_tokens (the context size); it is also the default for chat.
absl::StatusOr<CompletionParams> ParseCompletion(const Json& body, bool chat, int64_t max_new);

// A response's `usage`; cached_tokens is written as OpenAI's
// prompt_tokens_details.cached_tokens (prompt tokens taken from the server's cache). The
// times, when known (>= 0), go in llama-server's `timings` object (AddTimings).
struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  double prompt_ms = -1;     // admitted -> the first token: the prompt not taken from cache.
  double predicted_ms = -1;  // the first token -> the last.
};

// Adds llama-server's `timings` to a response (the whole one, or a stream's last chunk):
// cache_n, prompt_n (the prompt tokens decoded), prompt_ms, prompt_per_token_ms,
// prompt_per_second, predicted_n, predicted_ms, predicted_per_token_ms and
// predicted_per_second (predicted_n - 1 intervals, the first token closing the prompt).
// Nothing when the times are unknown.
void AddTimings(const Usage& usage, Json* response);

// A choice's `logprobs` for `entries` (null when p.logprobs < 0): completions' {tokens,
// token_logprobs, top_logprobs, text_offset} (text_offset: UTF-8 byte offsets into the
// completion, the first entry's `text_offset`), chat's {content: [{token, logprob, bytes,
// top_logprobs}]}.
Json LogprobsJson(const CompletionParams& p, const std::vector<LogprobEntry>& entries,
                  int64_t text_offset);
// The whole response: `text` with its finish_reason ("stop" or "length"), and the
// log-probabilities of its tokens when the request asked.
Json CompletionResponse(const CompletionParams& p, const std::string& id, int64_t created,
                        const std::string& model, const std::string& text,
                        const std::string& finish_reason, const Usage& usage,
                        const std::vector<LogprobEntry>& logprobs = {});
// One server-sent event's JSON: a piece of text with its tokens' log-probabilities (the
// first one `text_offset` bytes into the completion), or (finish_reason set) the last one.
Json StreamChunk(const CompletionParams& p, const std::string& id, int64_t created,
                 const std::string& model, const std::string& text,
                 const std::optional<std::string>& finish_reason,
                 const std::vector<LogprobEntry>& logprobs = {}, int64_t text_offset = 0);
// The usage chunk that ends a stream with stream_options.include_usage.
Json UsageChunk(const CompletionParams& p, const std::string& id, int64_t created,
                const std::string& model, const Usage& usage);
// OpenAI's error body: {"error": {"message", "type", "code"}}.
Json ErrorBody(const std::string& message, const std::string& type, int code);

}  // namespace tg::serve

#endif  // TENSORGRID_SERVE_OPENAI_API_H_
