// Mutex and MutexLock: a std::mutex that clang's thread-safety analysis understands, for the
// code that waits on a std::condition_variable or is taken on hot paths. libstdc++'s
// std::mutex carries no capability annotations, so ABSL_GUARDED_BY(a std::mutex) is never
// checked; absl::Mutex is annotated, but Debian's Abseil is not built for ThreadSanitizer,
// which then cannot see the happens-before its locks give. This wrapper keeps both: the
// lock is a plain std::mutex (TSan sees through it), and the annotations below let
// `clang -Wthread-safety` (the thread_safety test) check every field guarded by it.
//   tg::Mutex mu_;
//   int n_ ABSL_GUARDED_BY(mu_);
//   { tg::MutexLock lock(&mu_); ++n_; cv_.wait(lock.native()); }
// Thread-safety: a mutex, as std::mutex.
#ifndef TENSORGRID_CORE_MUTEX_H_
#define TENSORGRID_CORE_MUTEX_H_

#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"

namespace tg {

class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  // For std::unique_lock (MutexLock) and condition variables only.
  std::mutex& native() ABSL_LOCK_RETURNED(this) { return mu_; }

 private:
  std::mutex mu_;
};

// Holds `mu` for its scope. native() is the std::unique_lock a std::condition_variable
// waits on: the wait releases and retakes the mutex, which the analysis does not see, as
// with absl::CondVar.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : lock_(mu->native()) {}
  ~MutexLock() ABSL_UNLOCK_FUNCTION() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace tg

#endif  // TENSORGRID_CORE_MUTEX_H_
