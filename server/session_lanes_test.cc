// Tests of the session's device lanes (server/device_lanes.h as the session uses it): the
// computes of two devices run at the same time, and commands that share a buffer keep the
// order they came in, across devices too (a copy between devices, unless the client says its
// source is ready), in batches that go through the lanes exactly as a client's do.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/cpu_stream.h"
#include "gtest/gtest.h"
#include "server/server_testing.h"
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

// A CPU device whose streams call `before` ahead of each compute; an error from it is the
// compute's.
class HookDevice : public cpu::CpuDevice {
 public:
  using Hook = std::function<absl::Status(const Device&)>;
  HookDevice(std::string name, Hook before)
      : CpuDevice(name, "hook:" + name, 1), before_(std::move(before)) {}
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override {
    return std::unique_ptr<Stream>(std::make_unique<HookStream>(this, &before_));
  }

 private:
  class HookStream : public cpu::CpuStream {
   public:
    HookStream(Device* device, const Hook* before) : CpuStream(device, 1), before_(before) {}
    absl::Status Compute(Graph& graph) override {
      if (absl::Status s = (*before_)(*device()); !s.ok()) return s;
      return CpuStream::Compute(graph);
    }

   private:
    const Hook* before_;
  };

  const Hook before_;
};

// A device whose computes first meet the other device's (Meeting::Arrive).
HookDevice MeetingDevice(std::string name, Meeting* meeting) {
  return HookDevice(std::move(name), [meeting](const Device& d) {
    if (meeting->Arrive()) return absl::OkStatus();
    return absl::DeadlineExceededError(
        absl::StrCat(d.name(), " computed alone: the other device never started"));
  });
}

// Where a test lets a device's compute go on: the compute says it began and waits (at most
// kMeetTimeout) for the test to open the gate.
class Gate {
 public:
  bool Pass() {
    std::unique_lock<std::mutex> lock(mu_);
    began_ = true;
    changed_.notify_all();
    return changed_.wait_for(lock, kMeetTimeout, [&] { return open_; });
  }
  bool WaitBegan() {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, kMeetTimeout, [&] { return began_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    changed_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  bool began_ = false;
  bool open_ = false;
};

// A device whose computes wait at `gate` (Gate::Pass).
HookDevice GateDevice(std::string name, Gate* gate) {
  return HookDevice(std::move(name), [gate](const Device& d) {
    if (gate->Pass()) return absl::OkStatus();
    return absl::DeadlineExceededError(
        absl::StrCat(d.name(), " was held: what the test waited for never came"));
  });
}

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
  HookDevice dev0 = MeetingDevice("M0", &meeting), dev1 = MeetingDevice("M1", &meeting);
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

// A copy whose source the client has seen finish (CopyRange.src_ready) follows only the
// destination device's work: it runs, and a read of what it brought returns, while the
// source's device is still busy with later work (the next micro-batch of a pipeline).
TEST(SessionLanesTest, ACopyOfAReadySourceDoesNotWaitForTheSourceDevice) {
  Gate gate;
  HookDevice dev0 = GateDevice("G0", &gate);
  cpu::CpuDevice dev1("C1", "cpu:C1", 1);
  SessionEnv env;
  env.devices = {&dev0, &dev1};
  Session s("ready", env);
  const uint64_t b0 = Alloc(s, 1, 0, MatMulAdd::kBufferBytes);
  const uint64_t b1 = Alloc(s, 2, 1, MatMulAdd::kBufferBytes);
  constexpr uint64_t kFreeAt = 1536;  // free space in both buffers.
  const std::string bytes = "the source's bytes, written before";
  ASSERT_EQ(s.Handle(WriteRequest(3, b0, kFreeAt, bytes)).code(), 0);
  const MatMulAdd mm(7);
  pb::SessionRequest copy;
  copy.set_id(5);
  pb::CopyRange* c = copy.mutable_copy();
  c->mutable_src()->set_buffer(b0);
  c->mutable_src()->set_offset(kFreeAt);
  c->mutable_src()->set_size(bytes.size());
  c->set_dst_buffer(b1);
  c->set_dst_offset(kFreeAt);
  c->set_src_ready(true);
  std::vector<pb::SessionReply> replies;
  std::thread client([&] { replies = Serve(s, Batch({mm.Compute(4, b0, 0, 80, true), copy})); });
  ASSERT_TRUE(gate.WaitBegan());
  // Device 0 is held in its compute; the copy behind it, on device 1 only, has run.
  const pb::SessionReply read = s.Handle(ReadRequest(6, b1, kFreeAt, bytes.size()));
  gate.Open();
  client.join();
  EXPECT_EQ(read.code(), 0) << read.message();
  EXPECT_EQ(read.read().data(), bytes);
  ASSERT_EQ(replies.size(), 2u);
  for (const pb::SessionReply& r : replies) EXPECT_EQ(r.code(), 0) << r.message();
  ASSERT_EQ(replies[0].compute().outputs_size(), 1);
  EXPECT_TRUE(NearlyEqual(ToFloats(replies[0].compute().outputs(0)), mm.Expected()));
}

}  // namespace
}  // namespace tg::server
