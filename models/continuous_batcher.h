// ContinuousBatcher: serves generation requests on one BatchSession by continuous batching
// (vLLM's, llama.cpp server's): every Step() is one batch of at most n_batch tokens holding
// the next token of every running request first, then chunks of the prompts of requests still
// reading theirs (oldest first). A new request joins at the next step, whatever the others
// are doing, and a long prompt holds up the running requests' tokens for no step: it takes
// what the budget leaves. A request is admitted when the cache has cells for its prompt and
// its max_tokens beside the ones the running requests may still take, so a step never finds
// the cache full; it ends at its max_tokens, an end-of-generation token, when its callback
// returns false, or when it is cancelled.
// Prompt reuse (on unless turned off): a request that ends keeps its sequence as an idle
// cached one (the tokens it decoded: its prompt and all its picks but the last), and a new
// request starts from the longest prefix of its prompt that any live sequence (running or
// idle) holds: BatchSession::ForkPrefix shares those cells and decoding starts after them,
// or the idle sequence itself is taken over when the prefix is all of it. At most
// prompt.size() - 1 positions are reused, so the last prompt token is decoded and gives the
// first pick; a prefix shorter than kMinCachedPrefix is not worth a sequence. Idle sequences
// are ended, least recently used first, when an admission needs their cells or their
// sequence slot (KvCells::kMaxSequences): cells only idle sequences hold count as free when
// a request is admitted, so the cache never refuses or delays one. An idle sequence whose
// tokens begin another idle one's is dropped (the longer one serves every prefix it would).
// The picks are the ones without reuse (the shared K and V rows are what decoding the prefix
// again would write; the tests compare).
// Log-probabilities (OpenAI's logprobs): a request with top_logprobs >= 0 gets, with each
// token, its log-softmax over the raw logits of that position (temperature 1, no top-k/top-p)
// and the top_logprobs likeliest tokens'; a step asks the session for logits only when one of
// its requests wants them, so the others cost nothing extra.
// Moving to another session (tg-server --rpc-failover: the model loaded again without a lost
// server): Step(recoverable) gives back an error `recoverable` accepts without ending the
// requests; Suspend() then sends every running request back to the front of the queue to
// resume, its prompt its own plus every token it generated (the last pick, not decoded yet,
// included) and its max_tokens what it had left, and forgets every sequence (idle ones too:
// their cells go with the session); Rebind(session) goes on on the new one. Picks depend only
// on the tokens and their positions (a seeded draw is made at the token's position), so a
// resumed request hands over the tokens it would have without the move, each once. Not
// thread-safe: one owner thread.
#ifndef TENSORGRID_MODELS_CONTINUOUS_BATCHER_H_
#define TENSORGRID_MODELS_CONTINUOUS_BATCHER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/batch_session.h"

namespace tg {

// A generated token's log-probabilities: log-softmax (in double) of the raw logits at its
// position.
struct TokenLogprobs {
  float logprob = 0;  // the token's own, whether or not it is among `top`.
  // The likeliest tokens (id, log-probability), likeliest first, ties by the lower id.
  std::vector<std::pair<int32_t, float>> top;
};

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
  // Called once when the request is admitted, before its first token: how many of its
  // prompt tokens came from the cache (a live sequence's, shared, not decoded again); 0
  // without reuse. Not called for a request that ends before admission.
  std::function<void(int64_t cached_tokens)> on_admitted;
  // -1: no log-probabilities. N >= 0: on_logprobs is called with each token (just before
  // on_token, with the same token) and N alternatives (at most the vocabulary).
  int top_logprobs = -1;
  std::function<void(int32_t token, const TokenLogprobs&)> on_logprobs;
};

// What on_logprobs gets: the log-probabilities of `token` and of the `n` likeliest tokens
// under `logits` (n_vocab of them).
TokenLogprobs ComputeLogprobs(absl::Span<const float> logits, int32_t token, int n);

class ContinuousBatcher {
 public:
  // The shortest shared prefix reused (shorter ones are decoded again).
  static constexpr int64_t kMinCachedPrefix = 1;

  // At most `max_running` requests decode at once (the rest wait their turn). The batcher
  // owns every sequence of `session`. `reuse_prompts` false: a request's sequence ends with
  // it, and every prompt is decoded whole.
  ContinuousBatcher(BatchSession& session, int64_t n_batch,
                    int64_t max_running = KvCells::kMaxSequences, bool reuse_prompts = true)
      : session_(&session),
        n_batch_(n_batch),
        max_running_(max_running),
        reuse_prompts_(reuse_prompts) {}

  // Queues a request; its id. INVALID_ARGUMENT (through on_done, at once) for an empty
  // prompt or one that cannot fit the cache even alone.
  int Submit(GenerationRequest request);
  // Ends request `id` before the next step (nothing when it has ended).
  void Cancel(int id);
  // One batch: admits what fits, decodes, hands over the picks, ends what finished. A failed
  // step ends every request in it with the error (the others wait); OK with nothing to do.
  // With `recoverable` (may be null) true for the error, no request ends: the caller
  // Suspend()s and Rebind()s (or EndAll()s) before the next step.
  absl::Status Step(const std::function<bool(const absl::Status&)>& recoverable = nullptr);

  // Every running request goes back to the front of the queue (in admission order) to resume
  // where it was, and every sequence of the session is forgotten, not ended (the session may
  // be gone already). Until Rebind, only EndAll may be called. The number of requests resumed.
  int64_t Suspend();
  // Serves on `session` (empty, on the same vocabulary) from the next step on.
  void Rebind(BatchSession& session);
  // Ends every request, running or queued, with `status` (the session is not touched).
  void EndAll(const absl::Status& status);

  bool idle() const { return active_.empty() && waiting_.empty(); }
  int64_t running() const { return static_cast<int64_t>(active_.size()); }
  int64_t queued() const { return static_cast<int64_t>(waiting_.size()); }
  // Idle sequences kept for reuse, and the cells only they hold (free for an admission).
  int64_t cached_sequences() const { return static_cast<int64_t>(idle_.size()); }
  int64_t cached_cells() const;
  // Prompt tokens taken from the cache instead of decoded, summed over admitted requests.
  int64_t cached_tokens_total() const { return cached_tokens_total_; }

 private:
  struct Active {
    int id;
    int seq;
    GenerationRequest request;
    size_t prompt_done = 0;  // prompt tokens decoded so far.
    int64_t generated = 0;
    int32_t next = -1;            // the last pick, decoded at the next step.
    std::vector<int32_t> tokens;  // what the sequence holds: decoded (or shared) so far.
    bool cancelled = false;       // Cancel asked for it.
    bool ended = false;           // finished: leaves active_ at the end of the step.
    // Tokens handed over before the request resumed (Suspend), counted in generated.
    int64_t resumed = 0;
    int64_t Reserve() const;  // cells it may still take.
  };

  // A sequence kept after its request ended, for its prefixes.
  struct Idle {
    int seq;
    std::vector<int32_t> tokens;
    uint64_t last_used;  // clock_ when it went idle or a request last took a prefix.
  };
  // The live sequence holding the longest prefix of `prompt` (at most prompt.size() - 1).
  struct Match {
    int seq = -1;
    int64_t length = 0;
    int idle = -1;  // its index in idle_, or -1 for a running one.
  };

  void Admit();
  // Admits the front of waiting_ when a sequence and cells are there; false when it waits.
  bool AdmitFront(int64_t& reserved);
  Match LongestPrefix(const std::vector<int32_t>& prompt) const;
  // f() (NewSequence or ForkPrefix) once a sequence slot is free: idle sequences other than
  // `keep` end, least recently used first, while every slot is taken.
  absl::StatusOr<int> WithSlot(const std::function<absl::StatusOr<int>()>& f, int keep);
  // Ends the least recently used idle sequence other than `keep`; false when there is none.
  bool EvictOne(int keep = -1);
  void Finish(Active& a, const absl::Status& status);
  // Keeps a's sequence as an idle one (or ends it when it is of no use).
  void KeepIdle(Active& a);

  BatchSession* session_;  // never null outside Suspend() .. Rebind().
  const int64_t n_batch_;
  const int64_t max_running_;
  const bool reuse_prompts_;
  int next_id_ = 0;
  // A queued request, or a suspended one: with what it generated already (resumed > 0).
  struct Waiting {
    int id;
    GenerationRequest request;
    int64_t resumed = 0;
  };
  std::deque<Waiting> waiting_;
  std::vector<Active> active_;
  std::vector<int> cancelled_waiting_;
  std::vector<Idle> idle_;
  uint64_t clock_ = 0;
  int64_t cached_tokens_total_ = 0;
  mutable std::optional<int64_t> cached_cells_;  // cached_cells(), until idle_ or active_ change.
};

}  // namespace tg

#endif  // TENSORGRID_MODELS_CONTINUOUS_BATCHER_H_
