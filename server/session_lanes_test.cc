// Tests of the session's device lanes (server/device_lanes.h as the session uses it): the
// computes of two devices run at the same time, and commands that share a buffer keep the
// order they came in, across devices too (a copy between devices), in batches that go
// through the lanes exactly as a client's do.
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/cpu_stream.h"
#include "gtest/gtest.h"
#include "server/server_test_util.h"
#include "server/session.h"

namespace tg::server {
namespace {

using testing::AllocRequest;
using testing::MatMulAdd;
using testing::NearlyEqual;
using testing::ReadRequest;
using testing::ToFloats;
using testing::WriteRequest;
namespace pb = ::tensorgrid::v1;

// Long enough for a loaded machine to start a thread; a session that runs its devices one
// after the other waits it out and fails.
constexpr auto kMeetTimeout = std::chrono::seconds(5);

// Where the streams of two devices meet: each Compute waits until both have begun one.
class Meeting {
 public:
  bool Arrive() {
    std::unique_lock<std::mutex> lock(mu_);
    ++arrived_;
    met_.notify_all();
    return met_.wait_for(lock, kMeetTimeout, [&] { return arrived_ >= 2; });
  }

 private:
  std::mutex mu_;
  std::condition_variable met_;
  int arrived_ = 0;
};

class MeetingStream : public cpu::CpuStream {
 public:
  MeetingStream(Device* device, Meeting* meeting) : CpuStream(device, 1), meeting_(meeting) {}
  absl::Status Compute(Graph& graph) override {
    if (!meeting_->Arrive()) {
      return absl::DeadlineExceededError(
          absl::StrCat(device()->name(), " computed alone: the other device never started"));
    }
    return CpuStream::Compute(graph);
  }

 private:
  Meeting* meeting_;
};

// A CPU device whose streams meet the other device's before each compute.
class MeetingDevice : public cpu::CpuDevice {
 public:
  MeetingDevice(std::string name, Meeting* meeting)
      : CpuDevice(name, "meeting:" + name, 1), meeting_(meeting) {}
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override {
    return std::unique_ptr<Stream>(std::make_unique<MeetingStream>(this, meeting_));
  }

 private:
  Meeting* meeting_;
};

pb::SessionRequest Batch(std::vector<pb::SessionRequest> commands) {
  pb::SessionRequest r;
  r.set_id(1000);
  for (pb::SessionRequest& c : commands) *r.mutable_batch()->add_commands() = std::move(c);
  return r;
}

// The replies of one batch, in order.
std::vector<pb::SessionReply> Serve(Session& s, const pb::SessionRequest& batch) {
  std::vector<pb::SessionReply> out;
  EXPECT_TRUE(s.Serve(batch, [&](const pb::SessionReply& m) {
    for (const pb::SessionReply& r : m.batch().replies()) out.push_back(r);
    return true;
  }));
  return out;
}

uint64_t Alloc(Session& s, uint64_t id, uint32_t device, uint64_t size) {
  pb::SessionReply r = s.Handle(AllocRequest(id, device, size));
  EXPECT_EQ(r.code(), 0) << r.message();
  return r.alloc_buffer().buffer();
}

TEST(SessionLanesTest, ComputesOfTwoDevicesOverlap) {
  Meeting meeting;
  MeetingDevice dev0("M0", &meeting), dev1("M1", &meeting);
  SessionEnv env;
  env.devices = {&dev0, &dev1};
  Session s("lanes", env);
  const uint64_t b0 = Alloc(s, 1, 0, MatMulAdd::kBufferBytes);
  const uint64_t b1 = Alloc(s, 2, 1, MatMulAdd::kBufferBytes);
  const MatMulAdd mm0(5), mm1(6);
  // Device 0's compute comes first: run in order, it would wait for device 1's in vain.
  const std::vector<pb::SessionReply> replies =
      Serve(s, Batch({mm0.Compute(3, b0, 0, 77, true), mm1.Compute(4, b1, 1, 78, true)}));
  ASSERT_EQ(replies.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(replies[i].code(), 0) << replies[i].message();
    ASSERT_EQ(replies[i].compute().outputs_size(), 1);
    EXPECT_TRUE(
        NearlyEqual(ToFloats(replies[i].compute().outputs(0)), (i == 0 ? mm0 : mm1).Expected()));
  }
  EXPECT_EQ(replies[0].id(), 3u);
  EXPECT_EQ(replies[1].id(), 4u);
}

TEST(SessionLanesTest, CommandsSharingABufferKeepTheirOrderAcrossDevices) {
  SessionEnv env;
  env.devices = testing::TwoCpuDevices();
  ASSERT_EQ(env.devices.size(), 2u);
  Session s("order", env);
  const uint64_t b0 = Alloc(s, 1, 0, MatMulAdd::kBufferBytes);
  const uint64_t b1 = Alloc(s, 2, 1, MatMulAdd::kBufferBytes);
  constexpr uint64_t kOutBytes = MatMulAdd::M * MatMulAdd::N * sizeof(float);
  constexpr uint64_t kCopyAt = 1536;  // free space in b1.
  pb::SessionRequest copy;
  copy.set_id(5);
  copy.mutable_copy()->mutable_src()->set_buffer(b0);
  copy.mutable_copy()->mutable_src()->set_offset(MatMulAdd::kOutOff);
  copy.mutable_copy()->mutable_src()->set_size(kOutBytes);
  copy.mutable_copy()->set_dst_buffer(b1);
  copy.mutable_copy()->set_dst_offset(kCopyAt);
  for (uint32_t round = 0; round < 20; ++round) {
    const MatMulAdd mm(10 + round), other(40 + round);
    // Device 1 computes its own graph while device 0 computes the one whose result the copy
    // takes to device 1; the write then overwrites device 0's result, after the copy.
    const std::vector<pb::SessionReply> r = Serve(
        s, Batch({other.Compute(3, b1, 1, 90, round == 0), mm.Compute(4, b0, 0, 91, round == 0),
                  copy, WriteRequest(6, b0, MatMulAdd::kOutOff, std::string(kOutBytes, '\0')),
                  ReadRequest(7, b1, kCopyAt, kOutBytes),
                  ReadRequest(8, b0, MatMulAdd::kOutOff, kOutBytes),
                  ReadRequest(9, b1, MatMulAdd::kOutOff, kOutBytes)}));
    ASSERT_EQ(r.size(), 7u);
    for (const pb::SessionReply& reply : r) ASSERT_EQ(reply.code(), 0) << reply.message();
    EXPECT_TRUE(NearlyEqual(ToFloats(r[4].read().data()), mm.Expected())) << "round " << round;
    EXPECT_EQ(r[5].read().data(), std::string(kOutBytes, '\0')) << "round " << round;
    EXPECT_TRUE(NearlyEqual(ToFloats(r[6].read().data()), other.Expected())) << "round " << round;
  }
}

}  // namespace
}  // namespace tg::server
