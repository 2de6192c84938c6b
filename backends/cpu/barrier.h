// A reusable spinning barrier for the CPU thread pool: all n threads of a graph meet here
// between nodes. Spins briefly (nodes are microseconds long), then yields.
// Thread-safe; the thread count is fixed at construction.
#ifndef TENSORGRID_BACKENDS_CPU_BARRIER_H_
#define TENSORGRID_BACKENDS_CPU_BARRIER_H_

#include <atomic>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tg::cpu {

class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  Barrier(const Barrier&) = delete;
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

}  // namespace tg::cpu

#endif  // TENSORGRID_BACKENDS_CPU_BARRIER_H_
