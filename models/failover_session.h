// FailoverSession: a LlamaSession on a FailoverModel that goes on when a remote device's
// server is lost (--rpc-failover). It keeps the tokens whose positions the KV cache holds;
// when a call fails with an error that names a server of the plan, it drops the session,
// has the model loaded again on the devices left (FailoverModel::Recover), rebuilds the KV
// cache by decoding those tokens in one pass, tells `on_failover`, and finishes the call:
// a Decode runs again; a generation resumes from the last token it handed over, so
// `on_token` sees every token once. Greedy picks (ARGMAX) and SAMPLE's draws depend only
// on the tokens and their positions, so the tokens are those of a run without the loss: bit
// for bit with SessionOptions::deterministic (the rebuild decodes token by token, as the
// run did), else up to a near-tie between the batched rebuild's bits and the run's. Without
// failover, or for any other error, calls fail as LlamaSession's do. Not thread-safe.
#ifndef TENSORGRID_MODELS_FAILOVER_SESSION_H_
#define TENSORGRID_MODELS_FAILOVER_SESSION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/failover_model.h"
#include "models/llama_session.h"

namespace tg {

class FailoverSession {
 public:
  // Called after each recovery, before the interrupted call goes on.
  using OnFailover = std::function<void(const FailoverEvent&)>;

  static absl::StatusOr<std::unique_ptr<FailoverSession>> Create(FailoverModel& model,
                                                                 const SessionOptions& options,
                                                                 OnFailover on_failover = {});

  // LlamaSession's calls, with the contracts written there.
  absl::StatusOr<absl::Span<const float>> Decode(absl::Span<const int32_t> tokens,
                                                 bool all_logits = false);
  absl::StatusOr<int32_t> DecodeSample(absl::Span<const int32_t> tokens,
                                       const SamplingParams& params,
                                       absl::Span<const float>* logits = nullptr);
  absl::Status GenerateGreedy(int32_t token, int64_t max_tokens,
                              absl::FunctionRef<bool(int32_t)> on_token);
  absl::Status Generate(int32_t token, int64_t max_tokens, const SamplingParams& params,
                        absl::FunctionRef<bool(int32_t)> on_token);
  // LlamaSession::RestoreState, kept as the tokens a recovery decodes again.
  absl::Status RestoreState(const SequenceState& state, int64_t n);
  void Reset() {
    if (session_ != nullptr) session_->Reset();
    history_.clear();
  }

  // The session now and the model it runs on: both are new after each recovery, so hold no
  // reference to them (or their tokenizer) across a call that may recover. Not after a
  // call failed with the error that ended a recovery (no device left, or another error
  // while the model was loaded again): every call then gives that error back.
  LlamaSession& session() { return *session_; }
  const LlamaModel& model() const { return model_.model(); }
  int64_t n_past() const { return session_->n_past(); }
  int failovers() const { return failovers_; }

 private:
  FailoverSession(FailoverModel& model, const SessionOptions& options, OnFailover on_failover)
      : model_(model), options_(options), on_failover_(std::move(on_failover)) {}

  // After `error`: a new session on the model without the lost server, its KV cache holding
  // history_. Gives `error` back when it names no server of the plan (or failover is off).
  absl::Status Recover(const absl::Status& error);
  // Runs `step` until it succeeds, or fails with an error Recover gives back.
  absl::Status WithFailover(absl::FunctionRef<absl::Status()> step);
  // GenerateGreedy (sample == nullptr) or Generate: resumed from the last token handed over.
  absl::Status GenerateResumable(int32_t token, int64_t max_tokens, const SamplingParams* sample,
                                 absl::FunctionRef<bool(int32_t)> on_token);

  FailoverModel& model_;
  const SessionOptions options_;
  const OnFailover on_failover_;
  std::unique_ptr<LlamaSession> session_;
  std::vector<int32_t> history_;  // the tokens at the cache's positions [0, n_past()).
  int failovers_ = 0;
  absl::Status broken_;  // why a recovery failed, leaving no session.
};

}  // namespace tg

#endif  // TENSORGRID_MODELS_FAILOVER_SESSION_H_
