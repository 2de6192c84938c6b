// ConfigureDeadlockDetection against Abseil's behaviour: a lock-order inversion kills the
// process under "abort" (Debian's Abseil default, kept by unit tests) and not under "ignore"
// (the binaries' default); a bad value is refused by name.
#include "core/deadlock_detection.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "absl/synchronization/mutex.h"

namespace tg {
namespace {

// Takes a then b, then b then a: a cycle in the lock-order graph, though one thread alone
// can never deadlock on it.
void InvertLockOrder() {
  absl::Mutex a, b;
  {
    absl::MutexLock la(&a);
    absl::MutexLock lb(&b);
  }
  {
    absl::MutexLock lb(&b);
    absl::MutexLock la(&a);
  }
}

// Sets TG_DEADLOCK_DETECTION to `value` (nullptr: unset) and configures from it.
absl::Status ConfigureWith(const char* value) {
  if (value == nullptr) {
    unsetenv("TG_DEADLOCK_DETECTION");
  } else {
    setenv("TG_DEADLOCK_DETECTION", value, 1);
  }
  absl::Status s = ConfigureDeadlockDetection();
  unsetenv("TG_DEADLOCK_DETECTION");
  return s;
}

TEST(DeadlockDetectionTest, AbortKillsTheProcessAtALockOrderCycle) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        if (ConfigureWith("abort").ok()) InvertLockOrder();
      },
      "Potential Mutex deadlock");
}

TEST(DeadlockDetectionTest, IgnoreAndUnsetLetTheProcessLive) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (const char* value : {"ignore", "", static_cast<const char*>(nullptr)}) {
    EXPECT_EXIT(
        {
          if (ConfigureWith(value).ok()) InvertLockOrder();
          std::exit(0);
        },
        ::testing::ExitedWithCode(0), "")
        << (value == nullptr ? "unset" : value);
  }
}

TEST(DeadlockDetectionTest, ReportPrintsTheCycleAndCarriesOn) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (ConfigureWith("report").ok()) InvertLockOrder();
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "Potential Mutex deadlock");
}

TEST(DeadlockDetectionTest, AnUnknownValueIsRefusedByName) {
  const absl::Status s = ConfigureWith("sometimes");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("TG_DEADLOCK_DETECTION=sometimes"));
  EXPECT_THAT(s.message(), ::testing::HasSubstr("ignore, report or abort"));
}

}  // namespace
}  // namespace tg
