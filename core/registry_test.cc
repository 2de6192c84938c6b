// Device registry and the CPU family: names, lookup errors, TG_CPU_DEVICES parsing.
#include "core/registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "backends/cpu/cpu_device.h"
#include "backends/register_builtin.h"

namespace tg {
namespace {

using ::testing::HasSubstr;

TEST(RegistryTest, CpuIsRegisteredOnceAndFoundByName) {
  ASSERT_TRUE(RegisterBuiltinBackends().ok());
  ASSERT_TRUE(RegisterBuiltinBackends().ok());  // idempotent.
  std::vector<Device*> devices = Registry::Get().devices();
  ASSERT_FALSE(devices.empty());
  Device* cpu = Registry::Get().CpuDevice();
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->type(), DeviceType::kCpu);
  auto found = Registry::Get().FindDevice(absl::AsciiStrToLower(std::string(cpu->name())));
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, cpu);
  EXPECT_GT(cpu->memory().total, 0u);
  auto missing = Registry::Get().FindDevice("GPU7");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr(std::string(cpu->name())));
  EXPECT_EQ(Registry::Get().DefaultDevices(), std::vector<Device*>{cpu});
}

TEST(RegistryTest, DuplicateFamilyIsRejected) {
  ASSERT_TRUE(RegisterBuiltinBackends().ok());
  auto status = Registry::Get().Register(std::make_unique<cpu::CpuFamily>(1, 1));
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
}

TEST(CpuFamilyTest, VirtualDevicesSplitThreads) {
  cpu::CpuFamily family(3, 8);
  std::vector<Device*> devices = family.devices();
  ASSERT_EQ(devices.size(), 3u);
  EXPECT_EQ(devices[0]->name(), "CPU0");
  EXPECT_EQ(devices[2]->name(), "CPU2");
  EXPECT_EQ(devices[1]->threads(), 2);
  cpu::CpuFamily tiny(4, 2);
  EXPECT_EQ(tiny.devices()[3]->threads(), 1);
}

TEST(CpuFamilyTest, DeviceCountFromEnvironment) {
  const char* saved = std::getenv("TG_CPU_DEVICES");
  std::string saved_value = saved ? saved : "";
  setenv("TG_CPU_DEVICES", "3", 1);
  EXPECT_EQ(*cpu::CpuDeviceCountFromEnv(), 3);
  for (const char* bad : {"0", "-2", "abc", "65", "2x"}) {
    setenv("TG_CPU_DEVICES", bad, 1);
    auto n = cpu::CpuDeviceCountFromEnv();
    ASSERT_FALSE(n.ok()) << bad;
    EXPECT_THAT(n.status().message(), HasSubstr(bad));
  }
  unsetenv("TG_CPU_DEVICES");
  EXPECT_EQ(*cpu::CpuDeviceCountFromEnv(), 1);
  if (saved != nullptr) setenv("TG_CPU_DEVICES", saved_value.c_str(), 1);
}

}  // namespace
}  // namespace tg
