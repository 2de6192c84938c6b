// Device selection shared by rpc-server and the tools: names and indices, the defaults of an
// empty list, and one error naming the flag and the item for each bad list; -t through
// Device::SetThreads; ResolveDevicePlan's split-mode and -ts checks. Runs on three virtual
// CPU devices.
#include "cli/device_flags.h"

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

TEST_F(DeviceFlagsTest, NamesAndIndicesInTheGivenOrder) {
  EXPECT_THAT(*PickDevices("CPU2,CPU0", "--device", DefaultDevices::kGpusAndRemoteElseCpus),
              ElementsAre(all_[2], all_[0]));
  EXPECT_THAT(*PickDevices(" 1 , CPU2", "--devices", DefaultDevices::kGpusAndRemoteElseCpus),
              ElementsAre(all_[1], all_[2]));
}

TEST_F(DeviceFlagsTest, EmptyListGivesTheDefault) {
  EXPECT_THAT(*PickDevices("", "--device", DefaultDevices::kFirstDefault), ElementsAre(all_[0]));
  // No GPUs here: the server serves every CPU device.
  EXPECT_EQ(*PickDevices("", "--devices", DefaultDevices::kLocalGpusElseCpus), all_);
  EXPECT_EQ(*PickDevices("", "--device", DefaultDevices::kGpusAndRemoteElseCpus), all_);
}

// A device of a given type and nothing else (DefaultDeviceList looks at types only).
class TypedDevice : public Device {
 public:
  explicit TypedDevice(DeviceType type) : type_(type) {}
  absl::string_view name() const override { return DeviceTypeName(type_); }
  absl::string_view description() const override { return "typed"; }
  DeviceType type() const override { return type_; }
  absl::string_view id() const override { return name(); }
  DeviceMemory memory() const override { return {}; }
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override {
    return absl::UnimplementedError("typed");
  }
  BufferType* default_buffer_type() override { return nullptr; }
  bool SupportsOp(const Tensor&) const override { return false; }
  bool SupportsBufferType(const BufferType*) const override { return false; }

 private:
  DeviceType type_;
};

// A split with no --device keeps off the client's CPU: GPUs and remote devices when there
// are any (llama.cpp's --rpc ... -ngl 99), else iGPUs, else every CPU device.
TEST(DefaultDeviceListTest, SplitsUseGpusAndRemoteDevicesBeforeTheCpus) {
  TypedDevice cpu0(DeviceType::kCpu), cpu1(DeviceType::kCpu), gpu(DeviceType::kGpu),
      igpu(DeviceType::kIgpu), remote0(DeviceType::kRemote), remote1(DeviceType::kRemote);
  constexpr DefaultDevices kSplit = DefaultDevices::kGpusAndRemoteElseCpus;
  const std::vector<Device*> mixed = {&cpu0, &remote0, &igpu, &gpu, &cpu1, &remote1};
  EXPECT_THAT(DefaultDeviceList(mixed, kSplit), ElementsAre(&remote0, &gpu, &remote1));
  EXPECT_THAT(DefaultDeviceList({&cpu0, &remote0, &cpu1}, kSplit), ElementsAre(&remote0));
  EXPECT_THAT(DefaultDeviceList({&cpu0, &igpu, &cpu1}, kSplit), ElementsAre(&igpu));
  EXPECT_THAT(DefaultDeviceList({&cpu0, &cpu1}, kSplit), ElementsAre(&cpu0, &cpu1));
  // The server's own list never counts remote devices.
  EXPECT_THAT(DefaultDeviceList(mixed, DefaultDevices::kLocalGpusElseCpus), ElementsAre(&gpu));
}

TEST_F(DeviceFlagsTest, BadListsNameTheFlagAndTheItem) {
  struct Case {
    const char* list;
    const char* message;
  };
  for (const Case& c : {Case{"CPU0,CPU0", "--devices lists CPU0 twice"},
                        Case{"0,CPU0", "--devices lists CPU0 twice"},
                        Case{"3", "--devices: no device 3 (there are 3)"}, Case{"GPU9", "GPU9"},
                        Case{",", "--devices lists no device"}}) {
    const absl::StatusOr<std::vector<Device*>> got =
        PickDevices(c.list, "--devices", DefaultDevices::kGpusAndRemoteElseCpus);
    ASSERT_FALSE(got.ok()) << c.list;
    EXPECT_THAT(std::string(got.status().message()), HasSubstr(c.message)) << c.list;
  }
}

TEST_F(DeviceFlagsTest, ThreadsReachEveryDeviceThatHasThem) {
  SetThreads(all_, 1);
  for (Device* d : all_) EXPECT_EQ(d->threads(), 1);
  SetThreads({all_[1]}, 3);
  EXPECT_EQ(all_[0]->threads(), 1);
  EXPECT_EQ(all_[1]->threads(), 3);
}

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
