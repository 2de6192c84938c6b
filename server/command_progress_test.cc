// Tests of server/command_progress: a waiter returns once its command is done (not before),
// learns of that command's failure, stops at the deadline, on cancellation and on Close.
#include "server/command_progress.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace tg::server {
namespace {

TEST(CommandProgressTest, WaitsUntilItsCommandIsDone) {
  CommandProgress progress;
  progress.Advance(3);
  EXPECT_TRUE(progress.WaitFor(3, absl::InfiniteFuture()).ok());
  std::atomic<bool> returned{false};
  absl::Status status;
  std::thread waiter([&] {
    status = progress.WaitFor(5, absl::Now() + absl::Seconds(30));
    returned = true;
  });
  progress.Advance(4);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(returned.load());  // 4 is not 5.
  progress.Advance(5);
  waiter.join();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(progress.done(), 5u);
}

TEST(CommandProgressTest, FailureOfTheCommandIsReported) {
  CommandProgress progress;
  progress.Advance(7, absl::InvalidArgumentError("bad range"));
  progress.Advance(8);
  const absl::Status failed = progress.WaitFor(7, absl::InfiniteFuture());
  EXPECT_EQ(failed.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(failed.message().find("bad range"), absl::string_view::npos) << failed;
  EXPECT_TRUE(progress.WaitFor(8, absl::InfiniteFuture()).ok());
}

TEST(CommandProgressTest, DeadlineCancellationAndClose) {
  CommandProgress progress;
  EXPECT_EQ(progress.WaitFor(1, absl::Now() + absl::Milliseconds(20)).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(progress.WaitFor(1, absl::InfiniteFuture(), [] { return true; }).code(),
            absl::StatusCode::kCancelled);
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    progress.Close();
  });
  EXPECT_EQ(progress.WaitFor(1, absl::InfiniteFuture()).code(), absl::StatusCode::kAborted);
  closer.join();
}

}  // namespace
}  // namespace tg::server
