// WaitForCollective on a fake clock: done in time is OK, an asynchronous error ends the wait
// at once with the call named, a collective that never finishes ends at the timeout (never
// a hang) after sleeping rather than spinning; and the timeout's environment value.
#include "backends/cuda/collective_wait.h"

#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tg::cuda {
namespace {

using ::testing::HasSubstr;

// A fake clock, and the polls of the waits on it.
struct FakeClock {
  int64_t now = 1000;
  int64_t slept = 0;
  int sleeps = 0;
  int64_t polls = 0;
  WaitClock clock() {
    return {[this] { return now; },
            [this](int64_t us) {
              now += us;
              slept += us;
              ++sleeps;
            }};
  }
  // WaitForCollective on this clock; `poll` runs with `polls` already counting it.
  absl::Status Wait(absl::FunctionRef<CollectiveProgress()> poll, int64_t timeout_us,
                    absl::string_view what) {
    return WaitForCollective(
        [&] {
          ++polls;
          return poll();
        },
        timeout_us, what, clock());
  }
};

TEST(CollectiveWaitTest, DoneIsOk) {
  FakeClock fc;
  const absl::Status s = fc.Wait(
      [&] {
        fc.now += 5;
        return CollectiveProgress{fc.polls == 3, absl::OkStatus()};
      },
      1000000, "ncclAllReduce");
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(fc.polls, 3);
  EXPECT_EQ(fc.sleeps, 0);  // short waits spin.
}

TEST(CollectiveWaitTest, AsyncErrorEndsTheWaitNamingTheCall) {
  FakeClock fc;
  const absl::Status s = fc.Wait(
      [&] {
        if (fc.polls < 100) return CollectiveProgress{};
        return CollectiveProgress{false, absl::UnavailableError("remote process exited")};
      },
      int64_t{1} << 40, "ncclAllReduce of 16 KiB over 2 GPUs");
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("ncclAllReduce of 16 KiB over 2 GPUs: remote process exited"));
  EXPECT_EQ(fc.polls, 100);
}

TEST(CollectiveWaitTest, NeverFinishingEndsAtTheTimeoutWithoutSpinning) {
  FakeClock fc;
  constexpr int64_t kTimeout = 3 * 1000000;
  const absl::Status s = fc.Wait([] { return CollectiveProgress{}; }, kTimeout, "ncclAllReduce");
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("did not finish in 3 s"));
  EXPECT_THAT(s.message(), HasSubstr("TG_NCCL_TIMEOUT_S"));
  EXPECT_GE(fc.now - 1000, kTimeout);
  EXPECT_LE(fc.now - 1000, kTimeout + kMaxPollSleepUs);
  // Sleeps grow to kMaxPollSleepUs: about one poll per millisecond, not millions.
  EXPECT_LT(fc.polls, kSpinPolls + 2 * kTimeout / kMaxPollSleepUs);
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
