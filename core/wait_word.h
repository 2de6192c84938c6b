// WaitWord: an int that threads wait on until it changes, the way the CPU backend's threads
// wait for each other: pause a while (waits between a graph's nodes last microseconds), yield a
// few times (an oversubscribed partner may need this core), then sleep on a futex (a wait
// for a remote reply lasts milliseconds and must not burn a core). Waking is a plain load
// when nobody sleeps. Thread-safe.
#ifndef TENSORGRID_CORE_WAIT_WORD_H_
#define TENSORGRID_CORE_WAIT_WORD_H_

#include <atomic>

namespace tg {

class WaitWord {
 public:
  explicit WaitWord(int value = 0) : value_(value) {}
  WaitWord(const WaitWord&) = delete;
  WaitWord& operator=(const WaitWord&) = delete;

  int Load() const { return value_.load(std::memory_order_acquire); }
  // Sets the word (sequentially consistent) and wakes every sleeping waiter.
  void Store(int value);
  // Adds one (wrapping past INT_MAX) and wakes every sleeping waiter.
  void Increment();
  // Subtracts `d`, wakes every sleeping waiter when that leaves `wake_at`, and returns the
  // value before.
  int FetchSub(int d, int wake_at);
  // Returns once the word differs from `value` (acquire): `spins` pauses (a yield every
  // 256 of them), then `yields` yields, then sleeps until a Store, Increment or FetchSub
  // wakes it. The defaults, about 120 us of pauses and 40 us of yields on a 2020s x86 core
  // with nothing else to run, outlast the waits between a graph's nodes and between decode
  // steps; a wait for a remote device sleeps.
  static constexpr int kSpins = 4096;
  static constexpr int kYields = 64;
  void WaitWhile(int value, int spins = kSpins, int yields = kYields);

 private:
  void WakeSleepers();

  alignas(64) std::atomic<int> value_;
  std::atomic<int> sleepers_{0};
};

}  // namespace tg

#endif  // TENSORGRID_CORE_WAIT_WORD_H_
