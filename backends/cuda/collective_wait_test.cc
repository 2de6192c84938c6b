// WaitForCollective on a fake clock: done in time is OK, an asynchronous error ends the wait
// at once with the call named, a collective that never finishes ends at the timeout (never
// a hang) after sleeping rather than spinning; and the timeout's environment value.
#include "backends/cuda/collective_wait.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tg::cuda {
namespace {

using ::testing::HasSubstr;

struct FakeClock {
  int64_t now = 1000;
  int64_t slept = 0;
  int sleeps = 0;
  WaitClock clock() {
    return {[this] { return now; },
            [this](int64_t us) {
              now += us;
              slept += us;
              ++sleeps;
            }};
  }
};

TEST(CollectiveWaitTest, DoneIsOk) {
  FakeClock fc;
  int polls = 0;
  const absl::Status s = WaitForCollective(
      [&] {
        ++polls;
        fc.now += 5;
        return CollectiveProgress{polls == 3, absl::OkStatus()};
      },
      1000000, "ncclAllReduce", fc.clock());
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(polls, 3);
  EXPECT_EQ(fc.sleeps, 0);  // short waits spin.
}

TEST(CollectiveWaitTest, AsyncErrorEndsTheWaitNamingTheCall) {
  FakeClock fc;
  int polls = 0;
  const absl::Status s = WaitForCollective(
      [&] {
        ++polls;
        if (polls < 100) return CollectiveProgress{};
        return CollectiveProgress{false, absl::UnavailableError("remote process exited")};
      },
      int64_t{1} << 40, "ncclAllReduce of 16 KiB over 2 GPUs", fc.clock());
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("ncclAllReduce of 16 KiB over 2 GPUs: remote process exited"));
  EXPECT_EQ(polls, 100);
}

TEST(CollectiveWaitTest, NeverFinishingEndsAtTheTimeoutWithoutSpinning) {
  FakeClock fc;
  int64_t polls = 0;
  constexpr int64_t kTimeout = 3 * 1000000;
  const absl::Status s = WaitForCollective(
      [&] {
        ++polls;
        return CollectiveProgress{};
      },
      kTimeout, "ncclAllReduce", fc.clock());
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("did not finish in 3 s"));
  EXPECT_THAT(s.message(), HasSubstr("TG_NCCL_TIMEOUT_S"));
  EXPECT_GE(fc.now - 1000, kTimeout);
  EXPECT_LE(fc.now - 1000, kTimeout + kMaxPollSleepUs);
  // Sleeps grow to kMaxPollSleepUs: about one poll per millisecond, not millions.
  EXPECT_LT(polls, kSpinPolls + 2 * kTimeout / kMaxPollSleepUs);
}

TEST(CollectiveWaitTest, TimeoutFromTheEnvironment) {
  std::string note;
  EXPECT_EQ(CollectiveTimeoutUs(nullptr, &note), kDefaultCollectiveTimeoutSeconds * 1000000);
  EXPECT_EQ(CollectiveTimeoutUs("5", &note), 5 * 1000000);
  EXPECT_TRUE(note.empty());
  EXPECT_EQ(CollectiveTimeoutUs("0", &note), kDefaultCollectiveTimeoutSeconds * 1000000);
  EXPECT_THAT(note, HasSubstr("TG_NCCL_TIMEOUT_S='0'"));
  note.clear();
  CollectiveTimeoutUs("soon", &note);
  EXPECT_THAT(note, HasSubstr("1 to 86400"));
}

}  // namespace
}  // namespace tg::cuda
