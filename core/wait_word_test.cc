// Tests of WaitWord: waiters see every change, sleepers are woken, and a long wait sleeps
// instead of burning a core (core/spin_barrier_test.cc and core/thread_pool_test.cc test the
// Barrier and ThreadPool built on it).
#include "core/wait_word.h"

#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <thread>

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

}  // namespace
}  // namespace tg
