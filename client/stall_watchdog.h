// StallWatchdog: runs a callback (cancelling a gRPC call) when a blocking operation armed
// with a time limit is still going when the limit passes. gRPC's synchronous streams have no
// per-read timeout; a watchdog thread that calls ClientContext::TryCancel turns a read or
// write that would block forever into one that fails. One operation armed at a time.
// Thread-safe; the callback runs on the watchdog's thread.
#ifndef TENSORGRID_CLIENT_STALL_WATCHDOG_H_
#define TENSORGRID_CLIENT_STALL_WATCHDOG_H_

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tg::rpc {

class StallWatchdog {
 public:
  explicit StallWatchdog(std::function<void()> on_stall);
  ~StallWatchdog();
  StallWatchdog(const StallWatchdog&) = delete;
  StallWatchdog& operator=(const StallWatchdog&) = delete;

  // The operation starting now must end (Disarm) within `limit`.
  void Arm(absl::Duration limit) ABSL_LOCKS_EXCLUDED(mu_);
  // The operation ended; true when the callback fired for it.
  bool Disarm() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop();

  const std::function<void()> on_stall_;
  absl::Mutex mu_;
  absl::Time deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool fired_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts after the state it reads.
};

}  // namespace tg::rpc

#endif  // TENSORGRID_CLIENT_STALL_WATCHDOG_H_
