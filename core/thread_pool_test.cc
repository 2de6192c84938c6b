// Tests of ThreadPool: Run returns only once every thread ran the job, also when a worker is
// slow enough that Run's wait goes to sleep.
#include "core/thread_pool.h"

#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tg {
namespace {

using std::chrono::milliseconds;

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
