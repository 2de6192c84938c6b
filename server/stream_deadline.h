// Stream deadlines: what ends an Upload or Download that stopped making progress, or whose
// session ended, so that neither a stalled client nor a forgotten stream pins a thread or
// a buffer. A CancellableStream is one such stream (the service's Upload reactor, a Download
// handler): it notes its progress (Touch) and ends itself when told (Cancel). The
// StreamWatchdog holds them weakly and cancels those idle for longer than its timeout
// (--stream-idle-timeout); a Session cancels the streams of its buffers when it ends.
// Thread-safety: everything here is thread-safe. Cancel never blocks on the network and
// may run beside the stream's own callbacks, so implementations serialize the two.
#ifndef TENSORGRID_SERVER_STREAM_DEADLINE_H_
#define TENSORGRID_SERVER_STREAM_DEADLINE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/mutex.h"

namespace tg::server {

class CancellableStream {
 public:
  CancellableStream();
  virtual ~CancellableStream() = default;
  CancellableStream(const CancellableStream&) = delete;
  CancellableStream& operator=(const CancellableStream&) = delete;

  // Ends the stream with `status` unless it has ended: the client gets the status, the
  // stream lets go of its buffer. Idempotent.
  virtual void Cancel(const absl::Status& status) = 0;

  // The stream made progress now (a message came, a write was accepted).
  void Touch();
  // When it last made progress (its creation, at first).
  absl::Time last_progress() const;

 private:
  std::atomic<int64_t> last_progress_ns_;  // absl::ToUnixNanos.
};

class StreamWatchdog {
 public:
  // `idle`: how long a stream may go without progress; zero or less: forever (the
  // watchdog then keeps nothing and starts no thread).
  explicit StreamWatchdog(absl::Duration idle);
  ~StreamWatchdog();  // stops the thread; streams still open are left alone.
  StreamWatchdog(const StreamWatchdog&) = delete;
  StreamWatchdog& operator=(const StreamWatchdog&) = delete;

  absl::Duration idle() const { return idle_; }
  // Watches `stream` until it is gone (the watchdog holds it weakly) or cancelled.
  void Watch(std::weak_ptr<CancellableStream> stream) ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels every watched stream idle since before `now - idle()`; returns how many.
  // The thread calls it about four times per timeout; tests call it directly.
  int Sweep(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // Streams watched (gone ones are dropped at each sweep).
  size_t watched() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  const absl::Duration idle_;
  mutable Mutex mu_;  // a std::mutex underneath, for the condition variable (core/mutex.h).
  std::condition_variable stop_cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::weak_ptr<CancellableStream>> streams_ ABSL_GUARDED_BY(mu_);
  // Started (under mu_) on the first Watch; joined by the destructor once stop_ is set.
  std::thread thread_;
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_STREAM_DEADLINE_H_
