// The tools' device flags: ResolveDevicePlan's split-mode, -ts and --expert-split checks. Runs
// on three virtual CPU devices.
#include "cli/rpc/device_flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include "backends/register_builtin.h"
#include "core/registry.h"

namespace tg {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class DeviceFlagsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    setenv("TG_CPU_DEVICES", "3", 1);
    ASSERT_TRUE(RegisterBuiltinBackends().ok());
  }
  void SetUp() override {
    all_ = Registry::Get().devices();
    ASSERT_EQ(all_.size(), 3u);
  }
  std::vector<Device*> all_;
};

TEST_F(DeviceFlagsTest, PlanChecksSplitModeAndProportions) {
  DeviceFlags f;
  f.devices = "CPU0,CPU1";
  EXPECT_THAT(std::string(ResolveDevicePlan(f).status().message()),
              HasSubstr("--device lists 2 devices but --split-mode is none"));
  f.split_mode = "layer";
  f.tensor_split = "3,1";
  absl::StatusOr<DevicePlan> plan = ResolveDevicePlan(f);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->mode, SplitMode::kLayer);
  EXPECT_THAT(plan->devices, ElementsAre(all_[0], all_[1]));
  EXPECT_THAT(plan->proportions, ElementsAre(0.75f, 0.25f));
  f.tensor_split = "1";
  EXPECT_THAT(std::string(ResolveDevicePlan(f).status().message()),
              HasSubstr("--tensor-split has 1 values for 2 devices"));
}

// --expert-split is a way of -sm tensor: refused with the other modes, carried in the plan.
TEST_F(DeviceFlagsTest, ExpertSplitGoesWithTensorSplitOnly) {
  DeviceFlags f;
  f.devices = "CPU0,CPU1";
  f.split_mode = "layer";
  f.expert_split = true;
  EXPECT_THAT(std::string(ResolveDevicePlan(f).status().message()),
              HasSubstr("--expert-split needs --split-mode tensor (is layer)"));
  f.split_mode = "tensor";
  absl::StatusOr<DevicePlan> plan = ResolveDevicePlan(f);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->expert_split);
  f.expert_split = false;
  plan = ResolveDevicePlan(f);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->expert_split);
}

}  // namespace
}  // namespace tg
