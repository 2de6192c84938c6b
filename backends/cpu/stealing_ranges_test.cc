#include "backends/cpu/stealing_ranges.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "backends/cpu/compute_params.h"
#include "core/spin_barrier.h"

namespace tg::cpu {
namespace {

TEST(StealingRangesTest, TheOwnerTakesItsRangeFromTheFrontInChunks) {
  StealingRanges ranges(2);
  ranges.Reset(0, 10, 25);
  int64_t begin, end, rest_end;
  std::vector<std::pair<int64_t, int64_t>> got;
  while (ranges.Take(0, 4, &begin, &end, &rest_end)) {
    EXPECT_EQ(rest_end, 25);
    got.emplace_back(begin, end);
  }
  const std::vector<std::pair<int64_t, int64_t>> want = {{10, 14}, {14, 18}, {18, 22}, {22, 25}};
  EXPECT_EQ(got, want);
  EXPECT_FALSE(ranges.Steal(1, 4, &begin, &end));
}

TEST(StealingRangesTest, AThiefTakesFromTheBackAndTheOwnerSeesItsRangeShrink) {
  StealingRanges ranges(3);
  ranges.Reset(1, 100, 120);
  int64_t begin, end, rest_end;
  ASSERT_TRUE(ranges.Steal(0, 6, &begin, &end));  // thread 0's own range is empty: tries 1.
  EXPECT_EQ(begin, 114);
  EXPECT_EQ(end, 120);
  ASSERT_TRUE(ranges.Take(1, 10, &begin, &end, &rest_end));
  EXPECT_EQ(begin, 100);
  EXPECT_EQ(end, 110);
  EXPECT_EQ(rest_end, 114);
  ASSERT_TRUE(ranges.Steal(2, 6, &begin, &end));  // what is left is shorter than a chunk.
  EXPECT_EQ(begin, 110);
  EXPECT_EQ(end, 114);
  EXPECT_FALSE(ranges.Take(1, 10, &begin, &end, &rest_end));
  EXPECT_FALSE(ranges.Steal(0, 6, &begin, &end));
}

// Threads meeting at a barrier between rounds, as a CPU stream's do between nodes: in every
// round each item is handed out exactly once, whoever takes it, and a round's items never
// reach another round (a thread may look at a range before its owner's Reset).
TEST(StealingRangesTest, EveryItemOfEveryRoundIsTakenExactlyOnce) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 2000;
  StealingRanges ranges(kThreads);
  Barrier barrier(kThreads);
  std::vector<std::atomic<int>> taken(kRounds * 64);
  std::atomic<int> foreign{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ComputeParams p;
      p.ith = t;
      p.nth = kThreads;
      p.ranges = &ranges;
      for (int round = 0; round < kRounds; ++round) {
        const int64_t n = 1 + round % 61;  // some shares empty, some a chunk or less.
        ForEachShare(p, n, 1 + round % 3, [&](int64_t begin, int64_t end, int64_t ahead_end) {
          if (begin < 0 || end > n || ahead_end > n || ahead_end < end) foreign.fetch_add(1);
          for (int64_t i = begin; i < end; ++i) taken[round * 64 + i].fetch_add(1);
        });
        barrier.Wait();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(foreign.load(), 0);
  for (int round = 0; round < kRounds; ++round) {
    for (int64_t i = 0; i < 64; ++i) {
      ASSERT_EQ(taken[round * 64 + i].load(), i < 1 + round % 61 ? 1 : 0)
          << "round " << round << " item " << i;
    }
  }
}

// A thread held up after its first chunk (a descheduled core) leaves the rest of its share to
// the others, while they still take their own shares front to back.
TEST(StealingRangesTest, AHeldUpThreadsShareIsTakenByTheOthers) {
  constexpr int64_t kItems = 200;
  StealingRanges ranges(2);
  Barrier barrier(2);
  std::vector<int> owner(kItems, -1);
  std::thread slow([&] {
    ranges.Reset(1, kItems / 2, kItems);
    int64_t begin, end, rest_end;
    const bool took = ranges.Take(1, 5, &begin, &end, &rest_end);  // before the other looks.
    barrier.Wait();
    barrier.Wait();  // held up until the other thread has run out of items.
    ASSERT_TRUE(took);
    for (int64_t i = begin; i < end; ++i) owner[i] = 1;
    while (ranges.Take(1, 5, &begin, &end, &rest_end) || ranges.Steal(1, 5, &begin, &end)) {
      for (int64_t i = begin; i < end; ++i) owner[i] = 1;
    }
  });
  ranges.Reset(0, 0, kItems / 2);
  barrier.Wait();
  int64_t begin, end, rest_end;
  int64_t last_end = 0;
  while (ranges.Take(0, 5, &begin, &end, &rest_end)) {
    EXPECT_EQ(begin, last_end);
    last_end = end;
    for (int64_t i = begin; i < end; ++i) owner[i] = 0;
  }
  while (ranges.Steal(0, 5, &begin, &end)) {
    for (int64_t i = begin; i < end; ++i) owner[i] = 0;
  }
  barrier.Wait();
  slow.join();
  for (int64_t i = 0; i < kItems; ++i) {
    EXPECT_EQ(owner[i], i >= kItems / 2 && i < kItems / 2 + 5 ? 1 : 0) << "item " << i;
  }
}

}  // namespace
}  // namespace tg::cpu
