// ThreadPool: persistent worker threads that run one function on all threads at once (the
// caller is thread 0): a CPU stream runs a graph this way, the meta device one thread per
// device. Workers spin briefly between jobs (decode steps come back to back), then sleep.
// Run() is called by one thread at a time.
#ifndef TENSORGRID_CORE_THREAD_POOL_H_
#define TENSORGRID_CORE_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

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

  // Spin iterations before a worker sleeps on the condition variable (~100 us).
  static constexpr int kSpinsBeforeSleep = 20000;

  const int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace tg

#endif  // TENSORGRID_CORE_THREAD_POOL_H_
