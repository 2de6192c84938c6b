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
}

bool StallWatchdog::Disarm() {
  absl::MutexLock lock(&mu_);
  deadline_ = absl::InfiniteFuture();
  return fired_;
}

void StallWatchdog::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    const absl::Time armed = deadline_;
    // Wakes when stopped, re-armed or disarmed (the deadline changed), or at the deadline.
    auto changed = [this, armed]()
                       ABSL_NO_THREAD_SAFETY_ANALYSIS { return stop_ || deadline_ != armed; };
    if (mu_.AwaitWithDeadline(absl::Condition(&changed), armed)) continue;
    fired_ = true;
    deadline_ = absl::InfiniteFuture();
    on_stall_();
  }
}

}  // namespace tg::rpc
