#include "core/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tg {

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  workers_.reserve(n_threads_ - 1);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::Run(const std::function<void(int)>& fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  fn(0);
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < kSpinsBeforeSleep) {
#if defined(__x86_64__)
      _mm_pause();
#endif
    } else {
      std::this_thread::yield();  // oversubscribed (several virtual CPU devices): let others run.
    }
  }
}

void ThreadPool::WorkerLoop(int ith) {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && spins < kSpinsBeforeSleep) {
#if defined(__x86_64__)
      _mm_pause();
#endif
      ++spins;
    }
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    (*job_)(ith);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace tg
