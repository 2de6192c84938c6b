// ContinuousBatcher: serves generation requests on one BatchSession by continuous batching
// (vLLM's, llama.cpp server's): every Step() is one batch of at most n_batch tokens holding
// the next token of every running request first, then chunks of the prompts of requests still
// reading theirs (oldest first). A new request joins at the next step, whatever the others
// are doing, and a long prompt holds up the running requests' tokens for no step: it takes
// what the budget leaves. A request is admitted when the cache has cells for its prompt and
// its max_tokens beside the ones the running requests may still take, so a step never finds
// the cache full; it ends (its cells free) at its max_tokens, an end-of-generation token, when
// its callback returns false, or when it is cancelled. Not thread-safe: one owner thread.
#ifndef TENSORGRID_MODELS_CONTINUOUS_BATCHER_H_
#define TENSORGRID_MODELS_CONTINUOUS_BATCHER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "models/batch_session.h"

namespace tg {

struct GenerationRequest {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 16;
  std::optional<SamplingParams> sampling;  // nullopt: greedy (ARGMAX).
  // Each generated token, in order; false stops the request (its cells free at once).
  std::function<bool(int32_t)> on_token;
  // Called once at the end: OK, or the error that ended it.
  std::function<void(const absl::Status&)> on_done;
  // Tokens that end generation (the model's end-of-generation ids); not handed over.
  std::vector<int32_t> stop_tokens;
};

class ContinuousBatcher {
 public:
  // At most `max_running` requests decode at once (the rest wait their turn).
  ContinuousBatcher(BatchSession& session, int64_t n_batch,
                    int64_t max_running = KvCells::kMaxSequences)
      : session_(session), n_batch_(n_batch), max_running_(max_running) {}

  // Queues a request; its id. INVALID_ARGUMENT (through on_done, at once) for an empty
  // prompt or one that cannot fit the cache even alone.
  int Submit(GenerationRequest request);
  // Ends request `id` before the next step (nothing when it has ended).
  void Cancel(int id);
  // One batch: admits what fits, decodes, hands over the picks, ends what finished. A failed
  // step ends every request in it with the error (the others wait); OK with nothing to do.
  absl::Status Step();

  bool idle() const { return active_.empty() && waiting_.empty(); }
  int64_t running() const { return static_cast<int64_t>(active_.size()); }
  int64_t queued() const { return static_cast<int64_t>(waiting_.size()); }

 private:
  struct Active {
    int id;
    int seq;
    GenerationRequest request;
    size_t prompt_done = 0;  // prompt tokens decoded so far.
    int64_t generated = 0;
    int32_t next = -1;        // the last pick, decoded at the next step.
    bool cancelled = false;   // Cancel asked for it.
    bool ended = false;       // finished: leaves active_ at the end of the step.
    int64_t Reserve() const;  // cells it may still take.
  };

  void Admit();
  void Finish(Active& a, const absl::Status& status);

  BatchSession& session_;
  const int64_t n_batch_;
  const int64_t max_running_;
  int next_id_ = 0;
  std::deque<std::pair<int, GenerationRequest>> waiting_;
  std::vector<Active> active_;
  std::vector<int> cancelled_waiting_;
};

}  // namespace tg

#endif  // TENSORGRID_MODELS_CONTINUOUS_BATCHER_H_
