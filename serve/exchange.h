// Exchange: one request's tokens on their way from the engine's decode thread to its HTTP
// handler. The decode thread turns each token into text (through StopText: a stop string ends
// the request and is never sent) and never blocks; the handler takes the text as it comes,
// or waits for the end. It also times the tokens (time to the first since the request
// arrived, the gaps between the next ones) into lock-free histograms, and keeps how many of
// its prompt tokens the engine took from its cache. Thread-safe.
#ifndef TENSORGRID_SERVE_EXCHANGE_H_
#define TENSORGRID_SERVE_EXCHANGE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "models/continuous_batcher.h"
#include "models/tokenizer.h"
#include "serve/latency_histogram.h"
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
  Exchange(const Tokenizer& tokenizer, std::vector<std::string> stops, int64_t max_tokens,
           TokenLatencies latencies = {})
      : tokenizer_(tokenizer),
        latencies_(std::move(latencies)),
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
  };
  // Waits up to `timeout` for new text or the end.
  Taken Take(absl::Duration timeout);
  // The client is gone: the engine ends the request at its next token.
  void Abandon();

 private:
  bool OnToken(int32_t token);
  void OnAdmitted(int64_t cached_tokens);
  void OnDone(const absl::Status& status);

  const Tokenizer& tokenizer_;
  const TokenLatencies latencies_;
  absl::Mutex mu_;
  StopText stop_ ABSL_GUARDED_BY(mu_);
  const int64_t max_tokens_;
  std::string text_ ABSL_GUARDED_BY(mu_);
  int64_t tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t cached_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point last_token_ ABSL_GUARDED_BY(mu_);  // when tokens_ > 0.
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool abandoned_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tg::serve

#endif  // TENSORGRID_SERVE_EXCHANGE_H_
