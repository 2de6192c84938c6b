// Failover plans: the lost server is the one the error's typed identity names
// (core/lost_endpoint.h), whatever its message says, and only when it is a server of the
// plan; the plan left drops every device of that server and renormalises -ts.
#include "models/failover_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backend.h"
#include "core/lost_endpoint.h"
#include "tests/lib/fake_device.h"

namespace tg {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

// A device known by its name: the plan reads a remote device's endpoint from it.
class NamedDevice : public ::tg::testing::FakeDevice {
 public:
  explicit NamedDevice(std::string name) : FakeDevice(name, DeviceType::kRemote, name) {}
};

class FailoverPlanTest : public ::testing::Test {
 protected:
  // -sm layer over a:1 (two devices), b:2, h:80 and the local CPU; -ts 0.1,0.2,0.3,0.2,0.2.
  FailoverPlanTest() {
    plan_.mode = SplitMode::kLayer;
    for (Device* d : {&a0_, &a1_, &b0_, &h0_, &cpu_}) plan_.devices.push_back(d);
    plan_.proportions = {0.1f, 0.2f, 0.3f, 0.2f, 0.2f};
  }

  NamedDevice a0_{"RPC[a:1]/0"}, a1_{"RPC[a:1]/1"}, b0_{"RPC[b:2]/0"}, h0_{"RPC[h:80]/0"},
      cpu_{"CPU"};
  DevicePlan plan_;
};

TEST_F(FailoverPlanTest, TheLostServerIsThePayloadsWhateverTheMessageNames) {
  // The message names b:2 in every phrase the client and servers write; the identity is a:1.
  const absl::Status error = WithLostEndpoint(
      absl::UnavailableError("rpc-server b:2 is gone (read failed): peer unreachable: b:2; "
                             "cannot reach rpc-server at b:2: x; peer_pull from b:2: y"),
      "a:1");
  EXPECT_EQ(LostServer(error, plan_), "a:1");
  // A message that names no server at all, and a code that is not UNAVAILABLE.
  EXPECT_EQ(LostServer(WithLostEndpoint(absl::InternalError("reply 3 out of order"), "b:2"), plan_),
            "b:2");
}

TEST_F(FailoverPlanTest, AMessageWithoutTheIdentityReportsNoLoss) {
  for (const std::string& message :
       {std::string("rpc-server b:2 is gone (read failed): Socket closed"),
        std::string("rpc-server b:2 is stalled (waiting for a reply): nothing for 30s"),
        std::string("rpc-server a:1: peer unreachable: b:2"),
        std::string("cannot reach rpc-server at b:2: Connection refused")}) {
    EXPECT_EQ(LostServer(absl::UnavailableError(message), plan_), std::nullopt) << message;
  }
  EXPECT_EQ(LostServer(absl::OkStatus(), plan_), std::nullopt);
}

TEST_F(FailoverPlanTest, OnlyAServerOfThePlanIsLost) {
  // A server left may still owe an error about one already dropped (not in this plan), and
  // an endpoint is matched whole: h:8 is not h:80, nor is a device name an endpoint.
  for (const char* other : {"c:3", "h:8", "h:800", "RPC[a:1]/0", "CPU"}) {
    EXPECT_EQ(LostServer(WithLostEndpoint(absl::UnavailableError("x"), other), plan_), std::nullopt)
        << other;
  }
  EXPECT_EQ(LostServer(WithLostEndpoint(absl::UnavailableError("x"), "h:80"), plan_), "h:80");
}

TEST_F(FailoverPlanTest, TheIdentityOutlivesTheContextAddedOnTheWayUp) {
  const absl::Status lost = WithLostEndpoint(absl::UnavailableError("is gone"), "b:2");
  const absl::Status wrapped =
      KeepIdentity(lost, absl::ResourceExhaustedError(absl::StrCat(
                             "KV cache does not fit on RPC[b:2]/0: ", lost.message())));
  EXPECT_EQ(LostServer(wrapped, plan_), "b:2");
}

TEST_F(FailoverPlanTest, ThePlanLeftDropsEveryDeviceOfTheServerAndRenormalises) {
  const absl::Status error = WithLostEndpoint(absl::UnavailableError("x"), "a:1");
  absl::StatusOr<DevicePlan> left = PlanWithout(plan_, "a:1", error);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(left->mode, SplitMode::kLayer);
  EXPECT_THAT(left->devices, ElementsAre(&b0_, &h0_, &cpu_));
  EXPECT_THAT(left->proportions,
              Pointwise(FloatNear(1e-6f), {0.3f / 0.7f, 0.2f / 0.7f, 0.2f / 0.7f}));
  // One device left runs -sm none; none left is the error, naming the server and the cause.
  DevicePlan two;
  two.mode = SplitMode::kLayer;
  two.devices = {&a0_, &b0_};
  two.proportions = {0.5f, 0.5f};
  left = PlanWithout(two, "b:2", error);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(left->mode, SplitMode::kNone);
  EXPECT_THAT(left->devices, ElementsAre(&a0_));
  const absl::StatusOr<DevicePlan> none = PlanWithout(*left, "a:1", error);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(), HasSubstr("rpc-server a:1 was lost"));
}

}  // namespace
}  // namespace tg
