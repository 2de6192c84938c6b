// StallWatchdog: runs a callback (cancelling a gRPC call) when a blocking operation armed
// with a time limit is still going when the limit passes. gRPC's synchronous streams have no
// per-read timeout; a watchdog thread that calls ClientContext::TryCancel turns a read or
// write that would block forever into one that fails. One operation armed at a time.
// Arm and Disarm wake the thread only when a deadline comes earlier than the one it sleeps
// towards: a session arms around every read and write, and on a host whose cores are all
// computing each wake-up takes one from a compute thread. Thread-safe; the callback runs on
// the watchdog's thread.
#ifndef TENSORGRID_CLIENT_STALL_WATCHDOG_H_
#define TENSORGRID_CLIENT_STALL_WATCHDOG_H_

#include <cstdint>
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
  // Times the thread has woken up so far (for tests).
  int64_t wakeups() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop();

  const std::function<void()> on_stall_;
  mutable absl::Mutex mu_;
  absl::Time deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();  // of the armed operation.
  absl::Time sleeping_until_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();  // the thread's.
  bool wake_ ABSL_GUARDED_BY(mu_) = false;  // a deadline before sleeping_until_ came.
  bool fired_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t wakeups_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // last: starts after the state it reads.
};

}  // namespace tg::rpc

#endif  // TENSORGRID_CLIENT_STALL_WATCHDOG_H_
