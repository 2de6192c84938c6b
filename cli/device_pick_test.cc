// Device selection shared by rpc-server and the tools: names and indices, the defaults of an
// empty list, and one error naming the flag and the item for each bad list; -t through
// Device::SetThreads. Runs on three virtual CPU devices.
#include "cli/device_pick.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "backends/register_builtin.h"
#include "core/registry.h"
#include "tests/lib/fake_device.h"

namespace tg {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class DevicePickTest : public ::testing::Test {
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

TEST_F(DevicePickTest, NamesAndIndicesInTheGivenOrder) {
  EXPECT_THAT(*PickDevices("CPU2,CPU0", "--device", DefaultDevices::kGpusAndRemoteElseCpus),
              ElementsAre(all_[2], all_[0]));
  EXPECT_THAT(*PickDevices(" 1 , CPU2", "--devices", DefaultDevices::kGpusAndRemoteElseCpus),
              ElementsAre(all_[1], all_[2]));
}

TEST_F(DevicePickTest, EmptyListGivesTheDefault) {
  EXPECT_THAT(*PickDevices("", "--device", DefaultDevices::kFirstDefault), ElementsAre(all_[0]));
  // No GPUs here: the server serves every CPU device.
  EXPECT_EQ(*PickDevices("", "--devices", DefaultDevices::kLocalGpusElseCpus), all_);
  EXPECT_EQ(*PickDevices("", "--device", DefaultDevices::kGpusAndRemoteElseCpus), all_);
}

// A device of a given type and nothing else (DefaultDeviceList looks at types only).
testing::FakeDevice Typed(DeviceType type) {
  return testing::FakeDevice(std::string(DeviceTypeName(type)), type, "typed");
}

// A split with no --device keeps off the client's CPU: GPUs and remote devices when there
// are any (llama.cpp's --rpc ... -ngl 99), else iGPUs, else every CPU device.
TEST(DefaultDeviceListTest, SplitsUseGpusAndRemoteDevicesBeforeTheCpus) {
  testing::FakeDevice cpu0 = Typed(DeviceType::kCpu), cpu1 = Typed(DeviceType::kCpu),
                      gpu = Typed(DeviceType::kGpu), igpu = Typed(DeviceType::kIgpu),
                      remote0 = Typed(DeviceType::kRemote), remote1 = Typed(DeviceType::kRemote);
  constexpr DefaultDevices kSplit = DefaultDevices::kGpusAndRemoteElseCpus;
  const std::vector<Device*> mixed = {&cpu0, &remote0, &igpu, &gpu, &cpu1, &remote1};
  EXPECT_THAT(DefaultDeviceList(mixed, kSplit), ElementsAre(&remote0, &gpu, &remote1));
  EXPECT_THAT(DefaultDeviceList({&cpu0, &remote0, &cpu1}, kSplit), ElementsAre(&remote0));
  EXPECT_THAT(DefaultDeviceList({&cpu0, &igpu, &cpu1}, kSplit), ElementsAre(&igpu));
  EXPECT_THAT(DefaultDeviceList({&cpu0, &cpu1}, kSplit), ElementsAre(&cpu0, &cpu1));
  // The server's own list never counts remote devices.
  EXPECT_THAT(DefaultDeviceList(mixed, DefaultDevices::kLocalGpusElseCpus), ElementsAre(&gpu));
}

TEST_F(DevicePickTest, BadListsNameTheFlagAndTheItem) {
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

TEST_F(DevicePickTest, ThreadsReachEveryDeviceThatHasThem) {
  SetThreads(all_, 1);
  for (Device* d : all_) EXPECT_EQ(d->threads(), 1);
  SetThreads({all_[1]}, 3);
  EXPECT_EQ(all_[0]->threads(), 1);
  EXPECT_EQ(all_[1]->threads(), 3);
}

}  // namespace
}  // namespace tg
