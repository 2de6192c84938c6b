// RankPool: one host thread per device of a meta device ("rank"), so that every device's
// subgraph is launched from its own thread and the devices really compute at once (each CPU
// device runs its own thread pool from there). Run(fn) calls fn(rank) on every rank, the
// caller being rank 0, and returns when all are done. RankBarrier makes the ranks meet
// between the steps of a collective. Workers spin briefly between jobs (decode steps come
// back to back), then sleep. Run() is called by one thread at a time; Wait() by the ranks.
#ifndef TENSORGRID_META_RANK_POOL_H_
#define TENSORGRID_META_RANK_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tg::meta {

class RankBarrier {
 public:
  explicit RankBarrier(int n) : n_(n) {}
  RankBarrier(const RankBarrier&) = delete;
  RankBarrier& operator=(const RankBarrier&) = delete;
  int size() const { return n_; }
  // Blocks until all n ranks have called Wait() for this phase.
  void Wait();

 private:
  // ~100 us of pause (as the CPU backend's barrier) before yielding the core (ranks are often on
  // oversubscribed CPUs: virtual devices share the host).
  static constexpr int kSpinsBeforeYield = 4096;
  const int n_;
  alignas(64) std::atomic<int> arrived_{0};
  alignas(64) std::atomic<int> phase_{0};
};

class RankPool {
 public:
  explicit RankPool(int n_ranks);
  ~RankPool();
  RankPool(const RankPool&) = delete;
  RankPool& operator=(const RankPool&) = delete;

  int size() const { return n_; }
  void Run(const std::function<void(int rank)>& fn);

 private:
  void WorkerLoop(int rank);

  // Spin iterations before a worker sleeps on the condition variable (~0.5 ms: longer than
  // the host work between two decode steps).
  static constexpr int kSpinsBeforeSleep = 20000;

  const int n_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace tg::meta

#endif  // TENSORGRID_META_RANK_POOL_H_
