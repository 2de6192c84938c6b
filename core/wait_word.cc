#include "core/wait_word.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <limits>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tg {
namespace {

static_assert(sizeof(std::atomic<int>) == sizeof(int) && std::atomic<int>::is_always_lock_free,
              "the futex word is the atomic's int");

constexpr int kPausesPerYield = 256;  // about 8 us.

int* FutexWord(std::atomic<int>* a) { return reinterpret_cast<int*>(a); }

}  // namespace

void WaitWord::Store(int value) {
  value_.store(value, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) WakeSleepers();
}

void WaitWord::Increment() {
  value_.fetch_add(1, std::memory_order_seq_cst);  // atomic arithmetic wraps, by definition.
  if (sleepers_.load(std::memory_order_seq_cst) > 0) WakeSleepers();
}

int WaitWord::FetchSub(int d, int wake_at) {
  const int before = value_.fetch_sub(d, std::memory_order_seq_cst);
  if (before - d == wake_at && sleepers_.load(std::memory_order_seq_cst) > 0) WakeSleepers();
  return before;
}

void WaitWord::WaitWhile(int value, int spins, int yields) {
  for (int i = 1; i <= spins; ++i) {
    if (value_.load(std::memory_order_acquire) != value) return;
#if defined(__x86_64__)
    _mm_pause();
#endif
    // A yield now and then: it returns at once when no other thread wants this core, and
    // lets the thread this one waits for run when it does (more threads than cores).
    if (i % kPausesPerYield == 0) std::this_thread::yield();
  }
  for (int i = 0; i < yields; ++i) {
    if (value_.load(std::memory_order_acquire) != value) return;
    std::this_thread::yield();
  }
  // Registering as a sleeper before the last check pairs with Store/FetchSub changing the
  // word before reading the sleepers (both sequentially consistent): either this thread sees
  // the new value, or the changer sees a sleeper and wakes it (FUTEX_WAIT itself returns at
  // once when the word no longer holds `value`).
  while (value_.load(std::memory_order_acquire) == value) {
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    if (value_.load(std::memory_order_seq_cst) == value) {
      syscall(SYS_futex, FutexWord(&value_), FUTEX_WAIT_PRIVATE, value, nullptr, nullptr, 0);
    }
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }
}

void WaitWord::WakeSleepers() {
  syscall(SYS_futex, FutexWord(&value_), FUTEX_WAKE_PRIVATE, std::numeric_limits<int>::max(),
          nullptr, nullptr, 0);
}

}  // namespace tg
