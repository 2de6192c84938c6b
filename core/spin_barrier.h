// A reusable barrier: the CPU backend's threads meet here between nodes, the meta device's
// per-device threads between the steps of a collective. A waiter spins briefly (nodes are
// microseconds long), yields a few times, then sleeps (a meta device's ranks may wait
// milliseconds for a remote device). Thread-safe; the thread count is fixed at construction.
#ifndef TENSORGRID_CORE_SPIN_BARRIER_H_
#define TENSORGRID_CORE_SPIN_BARRIER_H_

#include <atomic>

#include "core/wait_word.h"

namespace tg {

class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  Barrier(const Barrier&) = delete;
  int size() const { return n_; }
  Barrier& operator=(const Barrier&) = delete;

  void Wait() {
    if (n_ == 1) return;
    const int phase = phase_.Load();
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
      arrived_.store(0, std::memory_order_relaxed);
      phase_.Increment();
      return;
    }
    phase_.WaitWhile(phase);
  }

 private:
  const int n_;
  alignas(64) std::atomic<int> arrived_{0};
  WaitWord phase_;
};

}  // namespace tg

#endif  // TENSORGRID_CORE_SPIN_BARRIER_H_
