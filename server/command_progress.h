// CommandProgress: how far a session's commands have finished, for peers that must not read
// a buffer before the command that writes it is done. A PeerPull may name a command of the
// source session (`after`): the source's PeerCopy then waits here until that command has
// finished, so the client can send the pull at once instead of first waiting for the
// source's reply. Commands finish in request order as the client sees them (replies leave in
// order, server/reply_sequencer.h), so one number says it: every command up to done() has
// finished. A failed command is remembered (the most recent kRememberedFailures), so that a
// pull of what it should have written fails too instead of copying stale bytes.
// Thread-safety: all methods may be called from any thread; every field is guarded by mu_.
#ifndef TENSORGRID_SERVER_COMMAND_PROGRESS_H_
#define TENSORGRID_SERVER_COMMAND_PROGRESS_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/mutex.h"

namespace tg::server {

class CommandProgress {
 public:
  // Failures kept for WaitFor; older ones are forgotten (a pull names a recent command).
  static constexpr size_t kRememberedFailures = 64;

  // Every command up to request id `id` has finished; `failure` is command id's own error.
  void Advance(uint64_t id, const absl::Status& failure = absl::OkStatus())
      ABSL_LOCKS_EXCLUDED(mu_);
  // The session is gone: waiters stop waiting (ABORTED).
  void Close() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until command `id` has finished: OK, or FAILED_PRECONDITION naming its error,
  // ABORTED when the session closed first, DEADLINE_EXCEEDED at `deadline`, or CANCELLED
  // when `cancelled` (polled) says the waiter went away.
  absl::Status WaitFor(uint64_t id, absl::Time deadline,
                       const std::function<bool()>& cancelled = nullptr) const
      ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t done() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // A std::mutex underneath, for the condition variable (core/mutex.h).
  mutable Mutex mu_;
  mutable std::condition_variable advanced_;
  uint64_t done_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::pair<uint64_t, absl::Status>> failures_ ABSL_GUARDED_BY(mu_);  // oldest first.
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_COMMAND_PROGRESS_H_
