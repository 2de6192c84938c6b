#include "models/continuous_batcher.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/str_format.h"

namespace tg {

TokenLogprobs ComputeLogprobs(absl::Span<const float> logits, int32_t token, int n) {
  // log p_i = l_i - (max + log sum exp(l_j - max)): in double, so that a vocabulary of
  // small terms neither overflows nor loses them.
  const double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
  const double lse = max + std::log(sum);
  TokenLogprobs out;
  out.logprob = static_cast<float>(logits[token] - lse);
  const size_t k = std::min<size_t>(static_cast<size_t>(std::max(n, 0)), logits.size());
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  out.top.reserve(k);
  for (size_t i = 0; i < k; ++i) {
    out.top.emplace_back(ids[i], static_cast<float>(logits[ids[i]] - lse));
  }
  return out;
}

int64_t ContinuousBatcher::Active::Reserve() const {
  return static_cast<int64_t>(request.prompt.size() - prompt_done) +
         (request.max_tokens - generated);
}

int ContinuousBatcher::Submit(GenerationRequest request) {
  const int id = next_id_++;
  const int64_t need = static_cast<int64_t>(request.prompt.size()) + request.max_tokens;
  absl::Status refused;
  if (request.prompt.empty()) {
    refused = absl::InvalidArgumentError("the prompt has no tokens");
  } else if (request.max_tokens < 1) {
    refused = absl::InvalidArgumentError(
        absl::StrFormat("max_tokens %d must be at least 1", request.max_tokens));
  } else if (need > session_->cells().size()) {
    refused = absl::InvalidArgumentError(absl::StrFormat(
        "a prompt of %d tokens and %d to generate need %d cells; the cache has %d (raise -c)",
        request.prompt.size(), request.max_tokens, need, session_->cells().size()));
  }
  if (!refused.ok()) {
    if (request.on_done) request.on_done(refused);
    return id;
  }
  waiting_.push_back({id, std::move(request)});
  return id;
}

void ContinuousBatcher::Cancel(int id) {
  for (Active& a : active_) {
    if (a.id == id) a.cancelled = true;
  }
  for (const Waiting& w : waiting_) {
    if (w.id == id) cancelled_waiting_.push_back(id);
  }
}

void ContinuousBatcher::Finish(Active& a, const absl::Status& status) {
  a.ended = true;
  // A failed step's sequences end; one that ended well or was cancelled holds good rows.
  if (reuse_prompts_ && (status.ok() || absl::IsCancelled(status))) {
    KeepIdle(a);
  } else {
    session_->EndSequence(a.seq).IgnoreError();  // a live sequence of ours: cannot fail.
  }
  cached_cells_.reset();
  if (a.request.on_done) a.request.on_done(status);
}

namespace {

// Whether `a` is a prefix of `b` (or equal).
bool IsPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

}  // namespace

void ContinuousBatcher::KeepIdle(Active& a) {
  // Too short to be reused, or every prefix of it held by an idle sequence already. (The
  // session holds what a.tokens says; a sequence that does not is not kept either.)
  const bool useless =
      static_cast<int64_t>(a.tokens.size()) < kMinCachedPrefix ||
      session_->n_past(a.seq) != static_cast<int64_t>(a.tokens.size()) ||
      absl::c_any_of(idle_, [&a](const Idle& i) { return IsPrefix(a.tokens, i.tokens); });
  if (useless) {
    session_->EndSequence(a.seq).IgnoreError();
    return;
  }
  // The idle sequences it extends serve nothing it does not.
  std::erase_if(idle_, [this, &a](const Idle& i) {
    if (!IsPrefix(i.tokens, a.tokens)) return false;
    session_->EndSequence(i.seq).IgnoreError();
    return true;
  });
  idle_.push_back({a.seq, std::move(a.tokens), ++clock_});
}

bool ContinuousBatcher::EvictOne(int keep) {
  auto lru = idle_.end();
  for (auto it = idle_.begin(); it != idle_.end(); ++it) {
    if (it->seq != keep && (lru == idle_.end() || it->last_used < lru->last_used)) lru = it;
  }
  if (lru == idle_.end()) return false;
  session_->EndSequence(lru->seq).IgnoreError();
  idle_.erase(lru);
  cached_cells_.reset();
  return true;
}

int64_t ContinuousBatcher::cached_cells() const {
  if (cached_cells_.has_value()) return *cached_cells_;
  int64_t n = 0;
  const KvCells& cells = session_->cells();
  if (!idle_.empty()) {
    const int64_t end = cells.end();
    for (int32_t c = 0; c < end; ++c) {
      auto holds = [&](int seq) { return cells.Holds(c, seq); };
      if (absl::c_any_of(idle_, [&](const Idle& i) { return holds(i.seq); }) &&
          absl::c_none_of(active_, [&](const Active& a) { return holds(a.seq); })) {
        ++n;
      }
    }
  }
  cached_cells_ = n;
  return n;
}

ContinuousBatcher::Match ContinuousBatcher::LongestPrefix(
    const std::vector<int32_t>& prompt) const {
  Match best;
  bool best_whole = false;
  const size_t most = prompt.size() - 1;  // the last prompt token is decoded: the first pick.
  auto consider = [&](int seq, const std::vector<int32_t>& tokens, int idle) {
    const size_t n = std::min(most, tokens.size());
    const int64_t len =
        std::mismatch(prompt.begin(), prompt.begin() + n, tokens.begin()).first - prompt.begin();
    // Longer wins; at equal length an idle sequence that can be taken over whole (no new slot).
    const bool whole = idle >= 0 && len == static_cast<int64_t>(tokens.size());
    if (len > best.length || (len == best.length && len > 0 && whole && !best_whole)) {
      best = {seq, len, idle};
      best_whole = whole;
    }
  };
  for (const Active& a : active_) consider(a.seq, a.tokens, -1);
  for (size_t i = 0; i < idle_.size(); ++i) {
    consider(idle_[i].seq, idle_[i].tokens, static_cast<int>(i));
  }
  if (best.length < kMinCachedPrefix) return {};
  return best;
}

absl::StatusOr<int> ContinuousBatcher::WithSlot(const std::function<absl::StatusOr<int>()>& f,
                                                int keep) {
  for (;;) {
    absl::StatusOr<int> seq = f();
    if (!absl::IsResourceExhausted(seq.status()) || !EvictOne(keep)) return seq;
  }
}

bool ContinuousBatcher::AdmitFront(int64_t& reserved) {
  GenerationRequest& r = waiting_.front().request;
  Match m = reuse_prompts_ ? LongestPrefix(r.prompt) : Match{};
  // The sequence: an idle one taken over whole, a fork of m's prefix, or a new one.
  int seq = -1;
  std::optional<Idle> taken;  // given back to idle_ when the request must wait after all.
  if (m.idle >= 0 && m.length == static_cast<int64_t>(idle_[m.idle].tokens.size())) {
    taken = std::move(idle_[m.idle]);
    idle_.erase(idle_.begin() + m.idle);
    seq = taken->seq;
  } else if (m.length > 0) {
    absl::StatusOr<int> fork =
        WithSlot([&] { return session_->ForkPrefix(m.seq, m.length); }, m.idle >= 0 ? m.seq : -1);
    if (fork.ok()) {
      seq = *fork;
      for (Idle& i : idle_) {
        if (i.seq == m.seq) i.last_used = ++clock_;
      }
    } else if (m.idle >= 0) {
      EvictOne();  // the source is the one idle sequence left: its slot serves.
    } else {
      return false;  // every sequence slot is running.
    }
  }
  if (seq < 0) {
    m = {};
    absl::StatusOr<int> fresh = WithSlot([this] { return session_->NewSequence(); }, -1);
    if (!fresh.ok()) return false;  // every sequence slot is running.
    seq = *fresh;
  }
  std::vector<int32_t> tokens(r.prompt.begin(), r.prompt.begin() + m.length);
  active_.push_back({waiting_.front().id, seq, std::move(r)});
  Active& a = active_.back();
  a.resumed = waiting_.front().resumed;
  a.generated = a.resumed;  // its prompt ends with them; max_tokens counts them.
  a.prompt_done = static_cast<size_t>(m.length);
  a.tokens = std::move(tokens);
  cached_cells_.reset();
  // Cells for the rest of its prompt and its max_tokens: the free ones, then the ones only
  // idle sequences hold (those sequences end, least recently used first).
  const int64_t need = a.Reserve();
  const KvCells& cells = session_->cells();
  auto free = [&] { return cells.size() - cells.used() - reserved; };
  if (need > free() + cached_cells()) {
    // Not yet, and undone (first come, first served: the rest wait behind it).
    if (taken.has_value()) {
      idle_.push_back(std::move(*taken));
    } else {
      session_->EndSequence(seq).IgnoreError();
    }
    waiting_.front().request = std::move(a.request);
    active_.pop_back();
    cached_cells_.reset();
    return false;
  }
  while (need > free() && EvictOne()) {
  }
  reserved += need;
  waiting_.pop_front();
  if (a.resumed > 0) return true;  // admitted once already: told then.
  cached_tokens_total_ += m.length;
  if (a.request.on_admitted) a.request.on_admitted(m.length);
  return true;
}

void ContinuousBatcher::Admit() {
  for (int id : cancelled_waiting_) {
    auto it = std::find_if(waiting_.begin(), waiting_.end(),
                           [id](const Waiting& w) { return w.id == id; });
    if (it == waiting_.end()) continue;
    if (it->request.on_done) it->request.on_done(absl::CancelledError("cancelled while queued"));
    waiting_.erase(it);
  }
  cancelled_waiting_.clear();
  int64_t reserved = 0;
  for (const Active& a : active_) reserved += a.Reserve();
  while (!waiting_.empty() && static_cast<int64_t>(active_.size()) < max_running_ &&
         AdmitFront(reserved)) {
  }
}

absl::Status ContinuousBatcher::Step(const std::function<bool(const absl::Status&)>& recoverable) {
  for (Active& a : active_) {
    if (a.cancelled) Finish(a, absl::CancelledError("cancelled"));
  }
  std::erase_if(active_, [](const Active& a) { return a.ended; });
  Admit();
  // The running requests' next tokens first, then prompt chunks in admission order.
  std::vector<SequenceWork> work;
  std::vector<size_t> who;
  int64_t budget = n_batch_;
  for (size_t i = 0; i < active_.size() && budget > 0; ++i) {
    Active& a = active_[i];
    if (a.prompt_done < a.request.prompt.size()) continue;
    work.push_back({a.seq, {&a.next, 1}, a.request.sampling ? &*a.request.sampling : nullptr});
    who.push_back(i);
    --budget;
  }
  for (size_t i = 0; i < active_.size() && budget > 0; ++i) {
    Active& a = active_[i];
    const size_t left = a.request.prompt.size() - a.prompt_done;
    if (left == 0) continue;
    const size_t n = std::min<size_t>(left, static_cast<size_t>(budget));
    work.push_back({a.seq, absl::MakeConstSpan(a.request.prompt).subspan(a.prompt_done, n),
                    a.request.sampling ? &*a.request.sampling : nullptr});
    who.push_back(i);
    budget -= static_cast<int64_t>(n);
  }
  if (work.empty()) return absl::OkStatus();
  // Logits only when a request in the step wants its log-probabilities.
  const bool with_logits =
      absl::c_any_of(who, [this](size_t i) { return active_[i].request.top_logprobs >= 0; });
  absl::StatusOr<std::vector<SequenceResult>> results = session_->Step(work, with_logits);
  if (!results.ok()) {
    // The requests stay as they were before the step, for Suspend.
    if (recoverable && recoverable(results.status())) return results.status();
    for (size_t i : who) Finish(active_[i], results.status());
    std::erase_if(active_, [](const Active& a) { return a.ended; });
    return results.status();
  }
  for (size_t k = 0; k < who.size(); ++k) {
    Active& a = active_[who[k]];
    a.tokens.insert(a.tokens.end(), work[k].tokens.begin(), work[k].tokens.end());
    if (a.prompt_done < a.request.prompt.size()) {
      a.prompt_done += work[k].tokens.size();
      if (a.prompt_done < a.request.prompt.size()) continue;  // a chunk: its pick is not used.
    }
    const int32_t pick = (*results)[k].pick;
    const bool stop = absl::c_linear_search(a.request.stop_tokens, pick);
    if (!stop) {
      ++a.generated;
      a.next = pick;
      if (a.request.top_logprobs >= 0 && a.request.on_logprobs) {
        a.request.on_logprobs(pick,
                              ComputeLogprobs((*results)[k].logits, pick, a.request.top_logprobs));
      }
    }
    // A stop token is not handed over; on_token may end the request too.
    if (stop || !a.request.on_token(pick) || a.generated >= a.request.max_tokens) {
      Finish(a, absl::OkStatus());
    }
  }
  std::erase_if(active_, [](const Active& a) { return a.ended; });
  return absl::OkStatus();
}

int64_t ContinuousBatcher::Suspend() {
  const int64_t n = static_cast<int64_t>(active_.size());
  // Newest first to the front: the queue then starts with them in admission order.
  for (auto it = active_.rbegin(); it != active_.rend(); ++it) {
    Active& a = *it;
    if (a.generated > a.resumed) {
      // It read its whole prompt and picked since: a.tokens is that prompt and every pick but
      // the last, a.next, which the resumed request's last prompt token is.
      a.request.prompt = std::move(a.tokens);
      a.request.prompt.push_back(a.next);
    }
    if (a.cancelled) cancelled_waiting_.push_back(a.id);
    waiting_.push_front({a.id, std::move(a.request), a.generated});
  }
  active_.clear();
  idle_.clear();
  cached_cells_.reset();
  session_ = nullptr;
  return n;
}

void ContinuousBatcher::Rebind(BatchSession& session) {
  session_ = &session;
  cached_cells_.reset();
}

void ContinuousBatcher::EndAll(const absl::Status& status) {
  for (Active& a : active_) {
    if (!a.ended && a.request.on_done) a.request.on_done(status);
  }
  for (Waiting& w : waiting_) {
    if (w.request.on_done) w.request.on_done(status);
  }
  active_.clear();
  waiting_.clear();
  cancelled_waiting_.clear();
  cached_cells_.reset();
}

}  // namespace tg
