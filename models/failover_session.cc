#include "models/failover_session.h"

#include <chrono>
#include <utility>

#include "core/status_macros.h"

namespace tg {

absl::StatusOr<std::unique_ptr<FailoverSession>> FailoverSession::Create(
    FailoverModel& model, const SessionOptions& options, OnFailover on_failover) {
  std::unique_ptr<FailoverSession> s(new FailoverSession(model, options, std::move(on_failover)));
  absl::StatusOr<std::unique_ptr<LlamaSession>> session =
      LlamaSession::Create(model.model(), options);
  if (session.ok()) {
    s->session_ = std::move(*session);
    return s;
  }
  // Creating the cache may be what finds a server gone.
  TG_RETURN_IF_ERROR(s->Recover(session.status()));
  return s;
}

absl::Status FailoverSession::Recover(const absl::Status& error) {
  if (!model_.Recoverable(error)) return error;  // the session stays as it is.
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status reason = error;
  FailoverEvent event;
  // The rebuild may lose another server: recover again, from where the last attempt stood.
  for (bool first = true;; first = false) {
    session_.reset();  // before the model it runs on.
    absl::StatusOr<FailoverEvent> step_or = model_.Recover(reason);
    if (!step_or.ok()) {
      broken_ = step_or.status();
      return broken_;
    }
    FailoverEvent& step = *step_or;
    if (first) {
      event = std::move(step);
    } else {
      event.server += "," + step.server;
      event.plan = std::move(step.plan);
    }
    absl::StatusOr<std::unique_ptr<LlamaSession>> session =
        LlamaSession::Create(model_.model(), options_);
    if (!session.ok()) {
      reason = session.status();
      continue;
    }
    session_ = std::move(*session);
    if (history_.empty()) break;
    reason = session_->Decode(history_).status();
    if (reason.ok()) break;
  }
  event.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++failovers_;
  if (on_failover_) on_failover_(event);
  return absl::OkStatus();
}

absl::Status FailoverSession::WithFailover(absl::FunctionRef<absl::Status()> step) {
  TG_RETURN_IF_ERROR(broken_);
  absl::Status s = step();
  while (!s.ok()) {
    TG_RETURN_IF_ERROR(Recover(s));
    s = step();
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<const float>> FailoverSession::Decode(absl::Span<const int32_t> tokens,
                                                                bool all_logits) {
  absl::Span<const float> logits;
  TG_RETURN_IF_ERROR(WithFailover([&]() -> absl::Status {
    TG_ASSIGN_OR_RETURN(logits, session_->Decode(tokens, all_logits));
    return absl::OkStatus();
  }));
  history_.insert(history_.end(), tokens.begin(), tokens.end());
  return logits;
}

absl::StatusOr<int32_t> FailoverSession::DecodeSample(absl::Span<const int32_t> tokens,
                                                      const SamplingParams& params,
                                                      absl::Span<const float>* logits) {
  int32_t pick = -1;
  TG_RETURN_IF_ERROR(WithFailover([&]() -> absl::Status {
    TG_ASSIGN_OR_RETURN(pick, session_->DecodeSample(tokens, params, logits));
    return absl::OkStatus();
  }));
  history_.insert(history_.end(), tokens.begin(), tokens.end());
  return pick;
}

absl::Status FailoverSession::GenerateGreedy(int32_t token, int64_t max_tokens,
                                             absl::FunctionRef<bool(int32_t)> on_token) {
  return GenerateResumable(token, max_tokens, nullptr, on_token);
}

absl::Status FailoverSession::Generate(int32_t token, int64_t max_tokens,
                                       const SamplingParams& params,
                                       absl::FunctionRef<bool(int32_t)> on_token) {
  return GenerateResumable(token, max_tokens, &params, on_token);
}

absl::Status FailoverSession::GenerateResumable(int32_t token, int64_t max_tokens,
                                                const SamplingParams* sample,
                                                absl::FunctionRef<bool(int32_t)> on_token) {
  // The session decodes `token` and each pick but the last: after k picks, the cache holds
  // history_ + token + picks[0, k-1), and the next step decodes picks[k-1].
  TG_RETURN_IF_ERROR(broken_);
  bool stopped = false;
  while (true) {
    std::vector<int32_t> picks;
    auto hand_over = [&](int32_t pick) {
      picks.push_back(pick);
      stopped = !on_token(pick);
      return !stopped;
    };
    const absl::Status s = sample == nullptr
                               ? session_->GenerateGreedy(token, max_tokens, hand_over)
                               : session_->Generate(token, max_tokens, *sample, hand_over);
    if (!picks.empty()) {
      history_.push_back(token);
      history_.insert(history_.end(), picks.begin(), picks.end() - 1);
      token = picks.back();
      max_tokens -= static_cast<int64_t>(picks.size());
    }
    if (s.ok()) return s;
    TG_RETURN_IF_ERROR(Recover(s));
    if (stopped || max_tokens <= 0) return absl::OkStatus();
  }
}

absl::Status FailoverSession::RestoreState(const SequenceState& state, int64_t n) {
  if (!broken_.ok()) return broken_;
  TG_RETURN_IF_ERROR(session_->RestoreState(state, n));
  history_.assign(state.tokens.begin(), state.tokens.begin() + n);
  return absl::OkStatus();
}

}  // namespace tg
