#include "client/stall_watchdog.h"

#include <utility>

namespace tg::rpc {

StallWatchdog::StallWatchdog(std::function<void()> on_stall)
    : on_stall_(std::move(on_stall)), thread_([this] { Loop(); }) {}

StallWatchdog::~StallWatchdog() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void StallWatchdog::Arm(absl::Duration limit) {
  absl::MutexLock lock(&mu_);
  deadline_ = absl::Now() + limit;
  fired_ = false;
  if (deadline_ < sleeping_until_) wake_ = true;
}

bool StallWatchdog::Disarm() {
  absl::MutexLock lock(&mu_);
  deadline_ = absl::InfiniteFuture();  // the thread finds out when it next wakes.
  return fired_;
}

int64_t StallWatchdog::wakeups() const {
  absl::MutexLock lock(&mu_);
  return wakeups_;
}

void StallWatchdog::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    if (absl::Now() >= deadline_) {
      fired_ = true;
      deadline_ = absl::InfiniteFuture();
      on_stall_();
      continue;
    }
    // Sleeps towards the armed deadline; an operation that ends meanwhile leaves it alone,
    // and one armed later with a later deadline is looked at when this one passes.
    sleeping_until_ = deadline_;
    wake_ = false;
    auto woken = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stop_ || wake_; };
    mu_.AwaitWithDeadline(absl::Condition(&woken), sleeping_until_);
    ++wakeups_;
  }
}

}  // namespace tg::rpc
