// Tests of Barrier: with more threads than cores, every thread leaving a phase has seen every
// other thread's writes of it, whichever of WaitWord's stages (pause, yield, sleep) it waited in.
#include "core/spin_barrier.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tg {
namespace {

using std::chrono::milliseconds;

// Oversubscribed on purpose (more threads than this machine's cores), so that waiters reach
// every phase: spinning, yielding and sleeping.
TEST(BarrierTest, EveryThreadSeesEveryOtherThreadsWritesOfThePhase) {
  constexpr int kThreads = 6;
  constexpr int kPhases = 3000;
  Barrier barrier(kThreads);
  std::vector<std::atomic<int>> reached(kThreads);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int p = 1; p <= kPhases; ++p) {
        reached[i].store(p, std::memory_order_relaxed);
        if (p % 500 == i) std::this_thread::sleep_for(milliseconds(2));  // a late arrival.
        barrier.Wait();
        for (int j = 0; j < kThreads; ++j) {
          if (reached[j].load(std::memory_order_relaxed) < p) errors.fetch_add(1);
        }
        barrier.Wait();  // nobody starts the next phase before all have checked this one.
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
}

}  // namespace
}  // namespace tg
