// ThreadPool: persistent worker threads that run one function on all threads at once (the
// caller is thread 0): a CPU stream runs a graph this way, the meta device one thread per
// device. Workers wait for the next job as a WaitWord does (spin briefly: decode steps come
// back to back; then sleep), and Run() waits for them the same way. Run() is called by one
// thread at a time.
#ifndef TENSORGRID_CORE_THREAD_POOL_H_
#define TENSORGRID_CORE_THREAD_POOL_H_

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include "core/wait_word.h"

namespace tg {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Runs fn(ith) for ith in [0, size()) concurrently and returns when all have finished.
  void Run(const std::function<void(int ith)>& fn);

 private:
  void WorkerLoop(int ith);

  const int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;
  WaitWord generation_{0};  // counts jobs (wrapping); workers wait for it to move.
  WaitWord pending_{0};     // workers still running the current job.
  std::atomic<bool> stop_{false};
};

}  // namespace tg

#endif  // TENSORGRID_CORE_THREAD_POOL_H_
