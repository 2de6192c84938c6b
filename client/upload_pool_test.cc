// UploadPool with a recording runner in place of the Upload stream: every job runs once,
// the first error reaches Add and Wait and stops the jobs queued behind it, Add blocks
// while too many bytes are in flight, and jobs done elsewhere count in its totals.
#include "client/upload_pool.h"

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tg::rpc {
namespace {

UploadJob Job(uint64_t buffer, uint64_t offset, std::string bytes) {
  UploadJob job;
  job.buffer = buffer;
  job.offset = offset;
  job.bytes = std::move(bytes);
  return job;
}

TEST(UploadPoolTest, EveryJobRunsOnce) {
  absl::Mutex mu;
  absl::flat_hash_map<uint64_t, std::string> seen;  // buffer -> bytes.
  int runs = 0;
  UploadPool pool(3, [&](const UploadJob& job) -> absl::StatusOr<UploadResult> {
    absl::MutexLock lock(&mu);
    ++runs;
    seen[job.buffer] = job.bytes;
    return UploadResult{job.bytes.size(), 0};
  });
  for (uint64_t i = 0; i < 40; ++i) {
    ASSERT_TRUE(pool.Add(Job(i, 0, std::string(i + 1, 'a' + i % 26))).ok());
  }
  ASSERT_TRUE(pool.Wait().ok());
  absl::MutexLock lock(&mu);
  EXPECT_EQ(runs, 40);
  ASSERT_EQ(seen.size(), 40);
  for (uint64_t i = 0; i < 40; ++i) EXPECT_EQ(seen[i], std::string(i + 1, 'a' + i % 26));
}

// Jobs done without the pool (Connection::FillPieces) count in the same totals as its own.
TEST(UploadPoolTest, RecordDoneCountsBesideTheJobsItRan) {
  UploadPool pool(2, [](const UploadJob& job) -> absl::StatusOr<UploadResult> {
    return UploadResult{job.bytes.size(), 0};
  });
  ASSERT_TRUE(pool.Add(Job(1, 0, "abcd")).ok());
  pool.RecordDone(100, UploadResult{0, 60, 40});
  ASSERT_TRUE(pool.Wait().ok());
  const UploadStats stats = pool.stats();
  EXPECT_EQ(stats.queued, 104u);
  EXPECT_EQ(stats.done, 104u);
  EXPECT_EQ(stats.result.sent, 4u);
  EXPECT_EQ(stats.result.skipped, 60u);
  EXPECT_EQ(stats.result.from_file, 40u);
}

TEST(UploadPoolTest, TheFirstErrorStopsTheQueueAndIsReturnedOnce) {
  absl::Notification release;
  std::atomic<int> runs{0};
  UploadPool pool(1, [&](const UploadJob& job) -> absl::StatusOr<UploadResult> {
    ++runs;
    if (job.buffer == 1) {
      release.WaitForNotification();
      return absl::DataLossError("job 1 failed");
    }
    return UploadResult{job.bytes.size(), 0};
  });
  ASSERT_TRUE(pool.Add(Job(1, 0, "x")).ok());
  for (uint64_t i = 2; i <= 5; ++i) ASSERT_TRUE(pool.Add(Job(i, 0, "y")).ok());
  release.Notify();
  const absl::Status s = pool.Wait();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_EQ(runs.load(), 1);  // the four behind it were not sent.
  EXPECT_TRUE(pool.Wait().ok());
  ASSERT_TRUE(pool.Add(Job(6, 0, "z")).ok());  // works again.
  EXPECT_TRUE(pool.Wait().ok());
  EXPECT_EQ(runs.load(), 2);
}

TEST(UploadPoolTest, AddReturnsTheErrorOfAnEarlierJob) {
  UploadPool pool(2, [](const UploadJob&) -> absl::StatusOr<UploadResult> {
    return absl::UnavailableError("gone");
  });
  ASSERT_TRUE(pool.Add(Job(1, 0, "x")).ok());
  absl::Status s;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (s.ok() && absl::Now() < deadline) s = pool.Add(Job(2, 0, "y"));
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_TRUE(absl::IsUnavailable(pool.Wait()));
}

// Two jobs of 130 MiB pass the 256 MiB bound together: the second waits for the first.
TEST(UploadPoolTest, AddWaitsWhileTooManyBytesAreInFlight) {
  constexpr size_t kBig = size_t{130} << 20;
  absl::Notification release;
  UploadPool pool(4, [&](const UploadJob& job) -> absl::StatusOr<UploadResult> {
    if (job.buffer == 1) release.WaitForNotification();
    return UploadResult{job.bytes.size(), 0};
  });
  ASSERT_TRUE(pool.Add(Job(1, 0, std::string(kBig, 'a'))).ok());
  std::atomic<bool> added{false};
  std::thread second([&] {
    EXPECT_TRUE(pool.Add(Job(2, 0, std::string(kBig, 'b'))).ok());
    added = true;
  });
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(added.load());
  release.Notify();
  second.join();
  EXPECT_TRUE(added.load());
  EXPECT_TRUE(pool.Wait().ok());
}

}  // namespace
}  // namespace tg::rpc
