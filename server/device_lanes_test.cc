// Tests of server/device_lanes: order within a lane, overlap across lanes (each of two tasks
// waits to see the other start, which only running both at once allows), a task on two
// lanes after and before the work of both, and Drain.
#include "server/device_lanes.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace tg::server {
namespace {

// Long enough for a loaded machine to start a thread; a serial executor waits it out.
constexpr absl::Duration kMeetTimeout = absl::Seconds(5);

class Log {
 public:
  void Add(std::string s) {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.push_back(std::move(s));
  }
  std::vector<std::string> entries() {
    std::lock_guard<std::mutex> lock(mu_);
    return entries_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> entries_;
};

TEST(DeviceLanesTest, OneLaneRunsInSubmissionOrder) {
  DeviceLanes lanes(2);
  Log log;
  for (int i = 0; i < 50; ++i) {
    lanes.Submit({1}, [&log, i] { log.Add(std::to_string(i)); });
  }
  lanes.Drain();
  std::vector<std::string> want;
  for (int i = 0; i < 50; ++i) want.push_back(std::to_string(i));
  EXPECT_EQ(log.entries(), want);
}

TEST(DeviceLanesTest, TwoLanesOverlap) {
  DeviceLanes lanes(2);
  absl::Notification started[2];
  bool met[2] = {false, false};
  for (int lane = 0; lane < 2; ++lane) {
    lanes.Submit({lane}, [&, lane] {
      started[lane].Notify();
      met[lane] = started[1 - lane].WaitForNotificationWithTimeout(kMeetTimeout);
    });
  }
  lanes.Drain();
  EXPECT_TRUE(met[0]);
  EXPECT_TRUE(met[1]);
}

TEST(DeviceLanesTest, TaskOnTwoLanesFollowsBothAndPrecedesLaterWork) {
  DeviceLanes lanes(3);
  Log log;
  absl::Notification release;
  // Lane 0's task blocks until released, so the two-lane task must wait for it while lane 2
  // (not named by it) goes on.
  lanes.Submit({0}, [&] {
    release.WaitForNotificationWithTimeout(kMeetTimeout);
    log.Add("a0");
  });
  lanes.Submit({1}, [&] { log.Add("b1"); });
  lanes.Submit({1, 0, 1}, [&] { log.Add("copy01"); });
  lanes.Submit({1}, [&] { log.Add("c1"); });
  lanes.Submit({2}, [&] {
    log.Add("d2");
    release.Notify();
  });
  lanes.Drain();
  const std::vector<std::string> got = log.entries();
  auto at = [&](const std::string& s) {
    return std::find(got.begin(), got.end(), s) - got.begin();
  };
  ASSERT_EQ(got.size(), 5u);
  EXPECT_LT(at("d2"), at("a0"));  // lane 2 was not held up by lane 0.
  EXPECT_LT(at("a0"), at("copy01"));
  EXPECT_LT(at("b1"), at("copy01"));
  EXPECT_LT(at("copy01"), at("c1"));
}

TEST(DeviceLanesTest, DrainWaitsForEverything) {
  std::atomic<int> done{0};
  DeviceLanes lanes(4);
  for (int i = 0; i < 40; ++i) {
    lanes.Submit({i % 4, (i + 1) % 4}, [&] {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      ++done;
    });
  }
  lanes.Drain();
  EXPECT_EQ(done.load(), 40);
}

TEST(DeviceLanesTest, DestructorRunsWhatIsQueued) {
  std::atomic<int> done{0};
  {
    DeviceLanes lanes(2);
    for (int i = 0; i < 20; ++i) lanes.Submit({i % 2}, [&] { ++done; });
  }
  EXPECT_EQ(done.load(), 20);
}

}  // namespace
}  // namespace tg::server
