// Tests of WaitWord, and of the Barrier and ThreadPool built on it: waiters see every change,
// sleepers are woken, and a long wait sleeps instead of burning a core.
#include "core/wait_word.h"

#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/spin_barrier.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"

namespace tg {
namespace {

using std::chrono::milliseconds;

double ThreadCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Polls `done` for up to 10 s (a lost wake-up would otherwise hang the test).
bool Eventually(const std::atomic<bool>& done) {
  for (int i = 0; i < 1000 && !done.load(); ++i) std::this_thread::sleep_for(milliseconds(10));
  return done.load();
}

TEST(WaitWordTest, StoreWakesASleeper) {
  WaitWord w(0);
  std::atomic<bool> done{false};
  std::atomic<int> seen{-1};
  std::thread t([&] {
    w.WaitWhile(0, /*spins=*/0, /*yields=*/0);  // straight to the futex.
    seen = w.Load();
    done = true;
  });
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_FALSE(done.load());
  w.Store(7);
  ASSERT_TRUE(Eventually(done)) << "the sleeper was not woken";
  EXPECT_EQ(seen.load(), 7);
  t.join();
}

TEST(WaitWordTest, FetchSubWakesAtItsTarget) {
  WaitWord w(3);
  std::atomic<bool> done{false};
  std::thread t([&] {
    for (int v = w.Load(); v != 0; v = w.Load()) w.WaitWhile(v, 0, 0);
    done = true;
  });
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_EQ(w.FetchSub(1, 0), 3);
  EXPECT_EQ(w.FetchSub(1, 0), 2);
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_FALSE(done.load());
  EXPECT_EQ(w.FetchSub(1, 0), 1);
  ASSERT_TRUE(Eventually(done)) << "the sleeper was not woken at 0";
  t.join();
}

TEST(WaitWordTest, ALongWaitSleepsInsteadOfSpinning) {
  WaitWord w(0);
  std::atomic<double> cpu{-1};
  std::thread t([&] {
    const double before = ThreadCpuSeconds();
    w.WaitWhile(0);  // the defaults, which Barrier and ThreadPool use.
    cpu = ThreadCpuSeconds() - before;
  });
  std::this_thread::sleep_for(milliseconds(500));
  w.Store(1);
  t.join();
  // Spinning or yielding through the 500 ms would use most of it (at least a third of a
  // core on a loaded machine); the pause and yield phases take well under a millisecond.
  EXPECT_LT(cpu.load(), 0.05) << "CPU seconds used while waiting 0.5 s";
}

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

TEST(ThreadPoolTest, RunReturnsAfterEveryWorkerFinished) {
  ThreadPool pool(4);
  std::vector<int> hits(4, 0);
  for (int job = 0; job < 2000; ++job) {
    pool.Run([&](int ith) {
      if (job % 400 == 0 && ith == 3) std::this_thread::sleep_for(milliseconds(5));  // Run sleeps.
      ++hits[ith];
    });
    for (int i = 0; i < 4; ++i) ASSERT_EQ(hits[i], job + 1) << "thread " << i << ", job " << job;
  }
}

}  // namespace
}  // namespace tg
