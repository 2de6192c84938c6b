#include "core/thread_pool.h"

namespace tg {

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  workers_.reserve(n_threads_ - 1);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.Increment();  // publishes stop_ and wakes every worker.
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::Run(const std::function<void(int)>& fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  job_ = &fn;
  pending_.Store(n_threads_ - 1);
  generation_.Increment();  // publishes job_ and wakes sleeping workers.
  fn(0);
  for (int left = pending_.Load(); left != 0; left = pending_.Load()) {
    pending_.WaitWhile(left);
  }
}

void ThreadPool::WorkerLoop(int ith) {
  int seen = 0;
  for (;;) {
    generation_.WaitWhile(seen);
    seen = generation_.Load();
    if (stop_.load(std::memory_order_relaxed)) return;
    (*job_)(ith);
    pending_.FetchSub(1, /*wake_at=*/0);
  }
}

}  // namespace tg
