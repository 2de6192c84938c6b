#include "serve/exchange.h"

#include <limits>
#include <utility>

namespace tg::serve {

GenerationRequest Exchange::Request(std::vector<int32_t> prompt, std::vector<int32_t> stop_tokens,
                                    std::optional<SamplingParams> sampling) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens_;
  r.sampling = sampling;
  r.stop_tokens = std::move(stop_tokens);
  r.top_logprobs = top_logprobs_;
  std::shared_ptr<Exchange> self = shared_from_this();
  if (top_logprobs_ >= 0) {
    r.on_logprobs = [self](int32_t token, const TokenLogprobs& lp) { self->OnLogprobs(token, lp); };
  }
  r.on_token = [self](int32_t token) { return self->OnToken(token); };
  r.on_done = [self](const absl::Status& status) { self->OnDone(status); };
  r.on_admitted = [self](int64_t cached_tokens) { self->OnAdmitted(cached_tokens); };
  return r;
}

bool Exchange::OnToken(int32_t token) {
  const auto now = std::chrono::steady_clock::now();  // the token's pick just came back.
  const std::string piece = tokenizer_.TokenToPiece(token);
  absl::MutexLock lock(&mu_);
  // The histograms are lock-free: the decode thread never waits on a /metrics scrape.
  const std::chrono::steady_clock::time_point since =
      tokens_ == 0 ? latencies_.arrival : last_token_;
  LatencyHistogram* h =
      tokens_ == 0 ? latencies_.first_token.get() : latencies_.between_tokens.get();
  if (h != nullptr) h->Observe(absl::FromChrono(now - since));
  if (tokens_ == 0) first_token_ = now;
  last_token_ = now;
  ++tokens_;
  if (top_logprobs_ < 0) {
    text_ += stop_.Add(piece);
    return !stop_.stopped() && !abandoned_;
  }
  LogprobEntry e = next_logprobs_.value_or(
      LogprobEntry{"", std::numeric_limits<float>::quiet_NaN(), {}});  // null in JSON.
  next_logprobs_.reset();
  e.text = piece;
  held_.push_back(std::move(e));
  released_ += stop_.Add(piece);
  if (stop_.stopped()) {
    ReleaseRest();
  } else {
    ReleaseWhole();
  }
  return !stop_.stopped() && !abandoned_;
}

void Exchange::OnLogprobs(int32_t token, const TokenLogprobs& logprobs) {
  LogprobEntry e;  // its text is set by OnToken.
  e.logprob = logprobs.logprob;
  e.top.reserve(logprobs.top.size());
  for (const auto& [id, lp] : logprobs.top) e.top.emplace_back(tokenizer_.TokenToPiece(id), lp);
  absl::MutexLock lock(&mu_);
  next_logprobs_ = std::move(e);
}

void Exchange::ReleaseWhole() {
  // StopText releases a prefix of the pieces' concatenation, so released_ starts with the
  // first held token's text.
  while (!held_.empty() && released_.size() >= held_.front().text.size()) {
    const size_t n = held_.front().text.size();
    text_.append(released_, 0, n);
    released_.erase(0, n);
    entries_.push_back(std::move(held_.front()));
    held_.pop_front();
  }
}

void Exchange::ReleaseRest() {
  ReleaseWhole();
  if (!released_.empty() && !held_.empty()) {
    held_.front().text = released_;
    entries_.push_back(std::move(held_.front()));
  }
  text_ += released_;
  released_.clear();
  held_.clear();
}

void Exchange::OnAdmitted(int64_t cached_tokens) {
  const auto now = std::chrono::steady_clock::now();
  absl::MutexLock lock(&mu_);
  admitted_ = now;
  cached_tokens_ = cached_tokens;
}

void Exchange::OnDone(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (top_logprobs_ < 0) {
    text_ += stop_.Flush();
  } else {
    released_ += stop_.Flush();
    ReleaseRest();
  }
  status_ = status;
  done_ = true;
}

Exchange::Taken Exchange::Take(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this] {
    mu_.AssertHeld();
    return done_ || !text_.empty() || !entries_.empty();
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  Taken t;
  t.text.swap(text_);
  t.logprobs.swap(entries_);
  t.done = done_;
  t.status = status_;
  t.completion_tokens = tokens_;
  t.cached_tokens = cached_tokens_;
  if (done_ && tokens_ > 0) {
    using Ms = std::chrono::duration<double, std::milli>;
    t.prompt_ms = Ms(first_token_ - admitted_).count();
    t.predicted_ms = Ms(last_token_ - first_token_).count();
  }
  // Ended before its max_tokens: a stop string or an end-of-generation token.
  t.finish_reason = stop_.stopped() || tokens_ < max_tokens_ ? "stop" : "length";
  return t;
}

void Exchange::Abandon() {
  absl::MutexLock lock(&mu_);
  abandoned_ = true;
}

}  // namespace tg::serve
