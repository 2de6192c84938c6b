#include "server/stream_deadline.h"

#include <memory>

#include "gtest/gtest.h"

namespace tg::server {
namespace {

class FakeStream final : public CancellableStream {
 public:
  void Cancel(const absl::Status& status) override {
    ++cancels;
    last = status;
  }
  int cancels = 0;
  absl::Status last;
};

TEST(StreamWatchdogTest, CancelsOnlyIdleStreams) {
  StreamWatchdog watchdog(absl::Hours(1));  // the thread never sweeps within the test.
  auto idle = std::make_shared<FakeStream>();
  auto busy = std::make_shared<FakeStream>();
  watchdog.Watch(idle);
  watchdog.Watch(busy);
  const absl::Time later = absl::Now() + absl::Minutes(61);
  EXPECT_EQ(watchdog.Sweep(absl::Now()), 0);
  EXPECT_EQ(idle->cancels, 0);
  // Progress moves busy's deadline; idle made none.
  EXPECT_EQ(watchdog.Sweep(later), 2);
  EXPECT_EQ(idle->cancels, 1);
  EXPECT_EQ(idle->last.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(idle->last.message().find("--stream-idle-timeout"), std::string::npos);
  // A cancelled stream is no longer watched.
  EXPECT_EQ(watchdog.watched(), 0u);
}

TEST(StreamWatchdogTest, TouchKeepsAStreamAlive) {
  StreamWatchdog watchdog(absl::Seconds(10));
  auto s = std::make_shared<FakeStream>();
  watchdog.Watch(s);
  s->Touch();
  EXPECT_EQ(watchdog.Sweep(s->last_progress() + absl::Seconds(9)), 0);
  EXPECT_EQ(watchdog.Sweep(s->last_progress() + absl::Seconds(11)), 1);
}

TEST(StreamWatchdogTest, DropsStreamsThatEnded) {
  StreamWatchdog watchdog(absl::Seconds(10));
  auto s = std::make_shared<FakeStream>();
  watchdog.Watch(s);
  s.reset();
  EXPECT_EQ(watchdog.Sweep(absl::Now() + absl::Hours(1)), 0);
  EXPECT_EQ(watchdog.watched(), 0u);
}

TEST(StreamWatchdogTest, ThreadCancelsIdleStreams) {
  StreamWatchdog watchdog(absl::Milliseconds(200));
  auto s = std::make_shared<FakeStream>();
  watchdog.Watch(s);
  absl::SleepFor(absl::Seconds(1));
  EXPECT_EQ(s->cancels, 1);
}

TEST(StreamWatchdogTest, ZeroTimeoutWatchesNothing) {
  StreamWatchdog watchdog(absl::ZeroDuration());
  auto s = std::make_shared<FakeStream>();
  watchdog.Watch(s);
  EXPECT_EQ(watchdog.watched(), 0u);
}

}  // namespace
}  // namespace tg::server
