// SessionBufferRecycler: keeps the memory of large host buffers that sessions freed for a
// short while, so that the next session asking for a buffer of the same type and size (a
// client loading the same model again: tg-run after tg-run, a reconnect, a failover reload)
// gets memory whose pages are already mapped in. Fresh memory costs a page fault and the
// kernel's zeroing of every page on first touch, which was most of a warm-cache or
// --model-dir load's time on the server (the bytes themselves come from the page cache at
// memory speed). What a kept buffer holds is the previous owner's: SessionBuffer treats it as
// fresh memory and zeroes what no write reaches before anything reads it.
// Kept memory is given back after kKeepTime, beyond max_bytes (oldest first), and at once when
// an allocation would otherwise be refused for lack of memory (ReleaseAll). Thread-safe.
#ifndef TENSORGRID_SERVER_SESSION_BUFFER_RECYCLER_H_
#define TENSORGRID_SERVER_SESSION_BUFFER_RECYCLER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/backend.h"

namespace tg::server {

class SessionBufferRecycler {
 public:
  // Smaller buffers fault in quickly; keeping them is not worth the memory.
  static constexpr uint64_t kMinBytes = uint64_t{32} << 20;
  // Long enough for a client to start again (a script running tg-run after tg-run, a
  // reconnect after a failure), short enough that idle memory goes back soon.
  static constexpr absl::Duration kKeepTime = absl::Seconds(30);

  // max_bytes: the most memory kept at once (0: none is kept).
  explicit SessionBufferRecycler(uint64_t max_bytes, absl::Duration keep_time = kKeepTime);
  ~SessionBufferRecycler();  // frees what it keeps.
  SessionBufferRecycler(const SessionBufferRecycler&) = delete;
  SessionBufferRecycler& operator=(const SessionBufferRecycler&) = delete;

  // Takes `buffer` (asked for as `size` bytes) to keep, or frees it when it is not host
  // memory, smaller than kMinBytes or larger than max_bytes. Frees the oldest kept buffers
  // beyond max_bytes.
  void Keep(std::unique_ptr<Buffer> buffer, uint64_t size) ABSL_LOCKS_EXCLUDED(mu_);
  // A kept buffer of `type` asked for as exactly `size` bytes (the most recently kept), or
  // null.
  std::unique_ptr<Buffer> Take(const BufferType* type, uint64_t size) ABSL_LOCKS_EXCLUDED(mu_);
  // Frees every kept buffer; returns the bytes freed.
  uint64_t ReleaseAll() ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t kept_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  // The bytes kept of one buffer type: free memory as far as the next allocation is
  // concerned (a server adds them to the free memory it reports).
  uint64_t kept_bytes(const BufferType* type) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Kept {
    std::unique_ptr<Buffer> buffer;
    uint64_t size = 0;
    absl::Time until;
  };
  // Frees kept buffers whose time is up, until asked to stop.
  void Expire() ABSL_LOCKS_EXCLUDED(mu_);
  // Moves the oldest kept buffer into `freed`, to be freed outside the lock.
  void PopOldestLocked(std::vector<std::unique_ptr<Buffer>>* freed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t max_bytes_;
  const absl::Duration keep_time_;
  mutable absl::Mutex mu_;
  std::deque<Kept> kept_ ABSL_GUARDED_BY(mu_);  // oldest first.
  uint64_t kept_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread expirer_;
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_SESSION_BUFFER_RECYCLER_H_
