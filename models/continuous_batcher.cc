#include "models/continuous_batcher.h"

#include <algorithm>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/str_format.h"

namespace tg {

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
  } else if (need > session_.cells().size()) {
    refused = absl::InvalidArgumentError(absl::StrFormat(
        "a prompt of %d tokens and %d to generate need %d cells; the cache has %d (raise -c)",
        request.prompt.size(), request.max_tokens, need, session_.cells().size()));
  }
  if (!refused.ok()) {
    if (request.on_done) request.on_done(refused);
    return id;
  }
  waiting_.emplace_back(id, std::move(request));
  return id;
}

void ContinuousBatcher::Cancel(int id) {
  for (Active& a : active_) {
    if (a.id == id) a.cancelled = true;
  }
  for (auto& [waiting_id, request] : waiting_) {
    if (waiting_id == id) cancelled_waiting_.push_back(id);
  }
}

void ContinuousBatcher::Finish(Active& a, const absl::Status& status) {
  a.ended = true;
  session_.EndSequence(a.seq).IgnoreError();  // a live sequence of ours: cannot fail.
  if (a.request.on_done) a.request.on_done(status);
}

void ContinuousBatcher::Admit() {
  for (int id : cancelled_waiting_) {
    auto it = std::find_if(waiting_.begin(), waiting_.end(),
                           [id](const auto& w) { return w.first == id; });
    if (it == waiting_.end()) continue;
    if (it->second.on_done) it->second.on_done(absl::CancelledError("cancelled while queued"));
    waiting_.erase(it);
  }
  cancelled_waiting_.clear();
  int64_t reserved = 0;
  for (const Active& a : active_) reserved += a.Reserve();
  while (!waiting_.empty() && static_cast<int64_t>(active_.size()) < max_running_) {
    GenerationRequest& r = waiting_.front().second;
    const int64_t need = static_cast<int64_t>(r.prompt.size()) + r.max_tokens;
    const int64_t free = session_.cells().size() - session_.cells().used() - reserved;
    if (need > free) break;  // first come, first served: the rest wait behind it.
    absl::StatusOr<int> seq = session_.NewSequence();
    if (!seq.ok()) break;  // every sequence slot is taken.
    active_.push_back({waiting_.front().first, *seq, std::move(r)});
    reserved += need;
    waiting_.pop_front();
  }
}

absl::Status ContinuousBatcher::Step() {
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
  absl::StatusOr<std::vector<SequenceResult>> results = session_.Step(work);
  if (!results.ok()) {
    for (size_t i : who) Finish(active_[i], results.status());
    std::erase_if(active_, [](const Active& a) { return a.ended; });
    return results.status();
  }
  for (size_t k = 0; k < who.size(); ++k) {
    Active& a = active_[who[k]];
    if (a.prompt_done < a.request.prompt.size()) {
      a.prompt_done += work[k].tokens.size();
      if (a.prompt_done < a.request.prompt.size()) continue;  // a chunk: its pick is not used.
    }
    const int32_t pick = (*results)[k].pick;
    const bool stop = absl::c_linear_search(a.request.stop_tokens, pick);
    if (!stop) {
      ++a.generated;
      a.next = pick;
    }
    // A stop token is not handed over; on_token may end the request too.
    if (stop || !a.request.on_token(pick) || a.generated >= a.request.max_tokens) {
      Finish(a, absl::OkStatus());
    }
  }
  std::erase_if(active_, [](const Active& a) { return a.ended; });
  return absl::OkStatus();
}

}  // namespace tg
