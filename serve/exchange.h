// Exchange: one request's tokens on their way from the engine's decode thread to its HTTP
// handler. The decode thread turns each token into text (through StopText: a stop string ends
// the request and is never sent) and never blocks; the handler takes the text as it comes,
// or waits for the end. It also times the tokens (time to the first since the request
// arrived, the gaps between the next ones) into lock-free histograms, and keeps how many of
// its prompt tokens the engine took from its cache. With log-probabilities asked for, it keeps
// each token's entry beside its text and releases text only at token boundaries, so what a
// Take returns is exactly its entries' texts: a token whose text StopText holds back waits
// with it, and at a stop string the token it cuts keeps only the part before it (the tokens
// after are dropped). Thread-safe.
#ifndef TENSORGRID_SERVE_EXCHANGE_H_
#define TENSORGRID_SERVE_EXCHANGE_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "models/continuous_batcher.h"
#include "models/tokenizer.h"
#include "serve/latency_histogram.h"
#include "serve/openai_api.h"
#include "serve/stop_text.h"

namespace tg::serve {

// Where an exchange records its tokens' latencies; a null histogram records nothing. Shared:
// the engine may still decode a request after the HTTP front that made it is gone.
struct TokenLatencies {
  std::chrono::steady_clock::time_point arrival;     // the request reached its handler.
  std::shared_ptr<LatencyHistogram> first_token;     // arrival -> the first token.
  std::shared_ptr<LatencyHistogram> between_tokens;  // each token -> the request's next.
};

class Exchange : public std::enable_shared_from_this<Exchange> {
 public:
  // `top_logprobs` >= 0: each token's log-probabilities with that many alternatives.
  // `tokenizer` must outlive every call of the request's callbacks: the engine's own
  // (Engine::tokenizer(), which lives as long as the engine that calls them), never a
  // model's, which a --rpc-failover recovery destroys under running requests.
  Exchange(const Tokenizer& tokenizer, std::vector<std::string> stops, int64_t max_tokens,
           TokenLatencies latencies = {}, int top_logprobs = -1)
      : tokenizer_(tokenizer),
        latencies_(std::move(latencies)),
        top_logprobs_(top_logprobs),
        stop_(std::move(stops)),
        max_tokens_(max_tokens) {}

  // The request for the engine, its callbacks bound to this exchange (kept alive by them).
  GenerationRequest Request(std::vector<int32_t> prompt, std::vector<int32_t> stop_tokens,
                            std::optional<SamplingParams> sampling);

  struct Taken {
    std::string text;  // new text since the last Take.
    bool done = false;
    absl::Status status;        // when done.
    std::string finish_reason;  // when done: "stop" or "length".
    int64_t completion_tokens = 0;
    int64_t cached_tokens = 0;  // prompt tokens reused from the cache (known once admitted).
    double prompt_ms = -1;      // when done with tokens: admitted -> the first token.
    double predicted_ms = -1;   // when done with tokens: the first token -> the last.
    std::vector<LogprobEntry> logprobs;  // the tokens of `text` (with top_logprobs >= 0).
  };
  // Waits up to `timeout` for new text or the end.
  Taken Take(absl::Duration timeout);
  // The client is gone: the engine ends the request at its next token.
  void Abandon();

 private:
  bool OnToken(int32_t token);
  void OnLogprobs(int32_t token, const TokenLogprobs& logprobs);
  // Moves the whole tokens released_ holds to text_ and entries_.
  void ReleaseWhole() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The end: what released_ holds beyond whole tokens is the start of the token a stop string
  // cut (it gets that text); the tokens after it are dropped.
  void ReleaseRest() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnAdmitted(int64_t cached_tokens);
  void OnDone(const absl::Status& status);

  const Tokenizer& tokenizer_;
  const TokenLatencies latencies_;
  const int top_logprobs_;
  absl::Mutex mu_;
  StopText stop_ ABSL_GUARDED_BY(mu_);
  const int64_t max_tokens_;
  std::string text_ ABSL_GUARDED_BY(mu_);
  // With log-probabilities: the next token's (on_logprobs comes just before on_token), the
  // tokens whose text is not yet in text_, the text StopText released that is not a whole
  // token yet, and the entries of text_.
  std::optional<LogprobEntry> next_logprobs_ ABSL_GUARDED_BY(mu_);
  std::deque<LogprobEntry> held_ ABSL_GUARDED_BY(mu_);
  std::string released_ ABSL_GUARDED_BY(mu_);
  std::vector<LogprobEntry> entries_ ABSL_GUARDED_BY(mu_);
  int64_t tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t cached_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point last_token_ ABSL_GUARDED_BY(mu_);  // when tokens_ > 0.
  std::chrono::steady_clock::time_point first_token_ ABSL_GUARDED_BY(mu_);  // when tokens_ > 0.
  std::chrono::steady_clock::time_point admitted_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool abandoned_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tg::serve

#endif  // TENSORGRID_SERVE_EXCHANGE_H_
