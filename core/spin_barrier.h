// A reusable spinning barrier: the CPU backend's threads meet here between nodes, the meta
// device's per-device threads between the steps of a collective. Spins briefly (nodes are
// microseconds long), then yields. Thread-safe; the thread count is fixed at construction.
#ifndef TENSORGRID_CORE_SPIN_BARRIER_H_
#define TENSORGRID_CORE_SPIN_BARRIER_H_

#include <atomic>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tg {

class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  Barrier(const Barrier&) = delete;
  int size() const { return n_; }
  Barrier& operator=(const Barrier&) = delete;

  void Wait() {
    if (n_ == 1) return;
    const int phase = phase_.load(std::memory_order_relaxed);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
      arrived_.store(0, std::memory_order_relaxed);
      phase_.store(phase + 1, std::memory_order_release);
      return;
    }
    for (int spins = 0; phase_.load(std::memory_order_acquire) == phase; ++spins) {
      if (spins < kSpinsBeforeYield) {
#if defined(__x86_64__)
        _mm_pause();
#endif
      } else {
        std::this_thread::yield();
      }
    }
  }

 private:
  // ~a few microseconds of pause before giving the core away (matters with oversubscription).
  static constexpr int kSpinsBeforeYield = 4096;
  const int n_;
  alignas(64) std::atomic<int> arrived_{0};
  alignas(64) std::atomic<int> phase_{0};
};

}  // namespace tg

#endif  // TENSORGRID_CORE_SPIN_BARRIER_H_
