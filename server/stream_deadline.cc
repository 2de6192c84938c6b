#include "server/stream_deadline.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"

namespace tg::server {
namespace {

// The watchdog looks this many times per timeout: a stream goes at most a quarter of the
// timeout late, and a sweep of thousands of streams is microseconds.
constexpr int kSweepsPerTimeout = 4;
// ... but no more often than this (a test's 1 s timeout needs no faster sweeps).
constexpr absl::Duration kMinSweepInterval = absl::Milliseconds(100);

}  // namespace

CancellableStream::CancellableStream() : last_progress_ns_(absl::ToUnixNanos(absl::Now())) {}

void CancellableStream::Touch() {
  last_progress_ns_.store(absl::ToUnixNanos(absl::Now()), std::memory_order_relaxed);
}

absl::Time CancellableStream::last_progress() const {
  return absl::FromUnixNanos(last_progress_ns_.load(std::memory_order_relaxed));
}

StreamWatchdog::StreamWatchdog(absl::Duration idle) : idle_(idle) {}

StreamWatchdog::~StreamWatchdog() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StreamWatchdog::Watch(std::weak_ptr<CancellableStream> stream) {
  if (idle_ <= absl::ZeroDuration()) return;
  MutexLock lock(&mu_);
  streams_.push_back(std::move(stream));
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

size_t StreamWatchdog::watched() const {
  MutexLock lock(&mu_);
  return streams_.size();
}

int StreamWatchdog::Sweep(absl::Time now) {
  std::vector<std::shared_ptr<CancellableStream>> idle;
  {
    MutexLock lock(&mu_);
    auto keep = std::remove_if(streams_.begin(), streams_.end(),
                               [&](const std::weak_ptr<CancellableStream>& w) {
                                 std::shared_ptr<CancellableStream> s = w.lock();
                                 if (s == nullptr) return true;
                                 if (now - s->last_progress() < idle_) return false;
                                 idle.push_back(std::move(s));
                                 return true;
                               });
    streams_.erase(keep, streams_.end());
  }
  // Outside the lock: a stream's Cancel takes its own lock and may end it.
  const absl::Status status = absl::DeadlineExceededError(
      absl::StrFormat("stream made no progress for %d s (--stream-idle-timeout %d)",
                      absl::ToInt64Seconds(idle_), absl::ToInt64Seconds(idle_)));
  for (const auto& s : idle) s->Cancel(status);
  return static_cast<int>(idle.size());
}

void StreamWatchdog::Loop() {
  const absl::Duration interval = std::max(idle_ / kSweepsPerTimeout, kMinSweepInterval);
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (!stop_) stop_cv_.wait_for(lock.native(), absl::ToChronoNanoseconds(interval));
      if (stop_) return;
    }
    Sweep(absl::Now());
  }
}

}  // namespace tg::server
