#include "server/command_progress.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/lost_endpoint.h"

namespace tg::server {
namespace {

// How often a waiter looks at `cancelled`: a gone peer is noticed this fast.
constexpr auto kPollCancelled = std::chrono::milliseconds(50);

}  // namespace

void CommandProgress::Advance(uint64_t id, const absl::Status& failure) {
  {
    MutexLock lock(&mu_);
    done_ = std::max(done_, id);
    if (!failure.ok()) {
      failures_.emplace_back(id, failure);
      if (failures_.size() > kRememberedFailures) failures_.pop_front();
    }
  }
  advanced_.notify_all();
}

void CommandProgress::Close() {
  {
    MutexLock lock(&mu_);
    closed_ = true;
  }
  advanced_.notify_all();
}

absl::Status CommandProgress::WaitFor(uint64_t id, absl::Time deadline,
                                      const std::function<bool()>& cancelled) const {
  MutexLock lock(&mu_);
  while (done_ < id) {
    if (closed_) {
      return absl::AbortedError(
          absl::StrCat("the source session closed before its command ", id, " finished"));
    }
    if (cancelled && cancelled()) return absl::CancelledError("the reader went away");
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("source command ", id, " did not finish in time (done up to ", done_, ")"));
    }
    advanced_.wait_for(
        lock.native(), std::min<std::chrono::nanoseconds>(absl::ToChronoNanoseconds(left), kPollCancelled));
  }
  for (const auto& [failed, status] : failures_) {
    if (failed == id) {
      // A command that failed because this server lost a peer still says which.
      return KeepIdentity(status, absl::FailedPreconditionError(absl::StrCat(
                                      "source command ", id, " failed: ", status.message())));
    }
  }
  return absl::OkStatus();
}

uint64_t CommandProgress::done() const {
  MutexLock lock(&mu_);
  return done_;
}

}  // namespace tg::server
