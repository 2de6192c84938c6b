// StallWatchdog: fires for an operation that outlives its limit and only then, including a
// short limit armed while the thread sleeps towards a long one; and quick Arm/Disarm cycles
// (a session's reads and writes) do not wake its thread.
#include "client/stall_watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tg::rpc {
namespace {

// Polls `done` for up to `limit`; the watchdog's own limits below are far shorter.
template <typename F>
bool Eventually(F done, absl::Duration limit = absl::Seconds(10)) {
  const absl::Time end = absl::Now() + limit;
  while (!done()) {
    if (absl::Now() > end) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

TEST(StallWatchdogTest, FiresForAnOperationPastItsLimit) {
  std::atomic<int> fired{0};
  StallWatchdog dog([&] { ++fired; });
  const absl::Time start = absl::Now();
  dog.Arm(absl::Milliseconds(30));
  ASSERT_TRUE(Eventually([&] { return fired.load() == 1; }));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(30));
  EXPECT_TRUE(dog.Disarm());
  // Disarmed: nothing more fires.
  absl::SleepFor(absl::Milliseconds(60));
  EXPECT_EQ(fired.load(), 1);
}

TEST(StallWatchdogTest, AnOperationThatEndsInTimeDoesNotFire) {
  std::atomic<int> fired{0};
  StallWatchdog dog([&] { ++fired; });
  dog.Arm(absl::Milliseconds(50));
  EXPECT_FALSE(dog.Disarm());
  absl::SleepFor(absl::Milliseconds(120));  // past the deadline the thread slept towards.
  EXPECT_EQ(fired.load(), 0);
}

TEST(StallWatchdogTest, AShortLimitArmedDuringALongOneStillFiresOnTime) {
  std::atomic<int> fired{0};
  StallWatchdog dog([&] { ++fired; });
  dog.Arm(absl::Hours(1));
  absl::SleepFor(absl::Milliseconds(50));  // the thread is asleep towards the hour.
  EXPECT_FALSE(dog.Disarm());
  // The next operation's 30 ms must wake it.
  dog.Arm(absl::Milliseconds(30));
  EXPECT_TRUE(Eventually([&] { return fired.load() == 1; }, absl::Seconds(10)));
  EXPECT_TRUE(dog.Disarm());
}

TEST(StallWatchdogTest, ArmAndDisarmCyclesDoNotWakeTheThread) {
  StallWatchdog dog([] {});
  // The thread (woken, or just started) settles on sleeping towards this deadline.
  dog.Arm(absl::Seconds(30));
  absl::SleepFor(absl::Milliseconds(50));
  dog.Disarm();
  const int64_t before = dog.wakeups();
  for (int i = 0; i < 10000; ++i) {
    dog.Arm(absl::Seconds(30));
    EXPECT_FALSE(dog.Disarm());
  }
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(dog.wakeups(), before);
}

}  // namespace
}  // namespace tg::rpc
