#include "meta/rank_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tg::meta {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

}  // namespace

void RankBarrier::Wait() {
  if (n_ == 1) return;
  const int phase = phase_.load(std::memory_order_relaxed);
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
    arrived_.store(0, std::memory_order_relaxed);
    phase_.store(phase + 1, std::memory_order_release);
    return;
  }
  for (int spins = 0; phase_.load(std::memory_order_acquire) == phase; ++spins) {
    if (spins < kSpinsBeforeYield) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
  }
}

RankPool::RankPool(int n_ranks) : n_(n_ranks < 1 ? 1 : n_ranks) {
  workers_.reserve(n_ - 1);
  for (int r = 1; r < n_; ++r) workers_.emplace_back([this, r] { WorkerLoop(r); });
}

RankPool::~RankPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void RankPool::Run(const std::function<void(int)>& fn) {
  if (n_ == 1) {
    fn(0);
    return;
  }
  job_ = &fn;
  pending_.store(n_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  fn(0);
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < kSpinsBeforeSleep) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
  }
}

void RankPool::WorkerLoop(int rank) {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && spins < kSpinsBeforeSleep) {
      CpuRelax();
      ++spins;
    }
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    (*job_)(rank);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace tg::meta
