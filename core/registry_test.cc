// Device registry and the CPU family: names, lookup errors, TG_CPU_DEVICES parsing.
#include "core/registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "backends/cpu/cpu_device.h"
#include "backends/register_builtin.h"
#include "tests/lib/fake_device.h"

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

using ::tg::testing::FakeDevice;  // a name, a type and an id: all the registry reads.

class FakeFamily : public DeviceFamily {
 public:
  explicit FakeFamily(std::string name) : name_(std::move(name)) {}
  FakeFamily* Add(std::string device, DeviceType type, std::string id) {
    devices_.push_back(std::make_unique<FakeDevice>(std::move(device), type, std::move(id)));
    return this;
  }
  absl::string_view name() const override { return name_; }
  std::vector<Device*> devices() override {
    std::vector<Device*> out;
    for (auto& d : devices_) out.push_back(d.get());
    return out;
  }

 private:
  std::string name_;
  std::vector<std::unique_ptr<FakeDevice>> devices_;
};

std::vector<std::string> Names(const std::vector<Device*>& devices) {
  std::vector<std::string> out;
  for (Device* d : devices) out.emplace_back(d->name());
  return out;
}

// The same GPU seen by two families (CUDA first, then Vulkan) is used once, through the
// family registered first; naming it still finds the later family's device.
TEST(RegistryTest, DeviceWithAnEarlierFamilysIdIsHiddenButFoundByName) {
  Registry registry;
  auto cuda = std::make_unique<FakeFamily>("CUDA");
  cuda->Add("CUDA0", DeviceType::kGpu, "pci:0000:01:00.0")
      ->Add("CUDA1", DeviceType::kGpu, "pci:0000:02:00.0");
  auto vulkan = std::make_unique<FakeFamily>("Vulkan");
  vulkan->Add("Vulkan0", DeviceType::kGpu, "pci:0000:02:00.0")
      ->Add("Vulkan1", DeviceType::kGpu, "pci:0000:03:00.0")
      ->Add("Vulkan2", DeviceType::kIgpu, "");
  auto cpu = std::make_unique<FakeFamily>("CPU");
  cpu->Add("CPU", DeviceType::kCpu, "");
  ASSERT_TRUE(registry.Register(std::move(cuda)).ok());
  ASSERT_TRUE(registry.Register(std::move(vulkan)).ok());
  ASSERT_TRUE(registry.Register(std::move(cpu)).ok());
  EXPECT_THAT(Names(registry.devices()),
              ::testing::ElementsAre("CUDA0", "CUDA1", "Vulkan1", "Vulkan2", "CPU"));
  EXPECT_THAT(Names(registry.DefaultDevices()),
              ::testing::ElementsAre("CUDA0", "CUDA1", "Vulkan1"));
  absl::StatusOr<Device*> hidden = registry.FindDevice("vulkan0");
  ASSERT_TRUE(hidden.ok()) << hidden.status();
  EXPECT_EQ((*hidden)->name(), "Vulkan0");
  EXPECT_THAT(registry.FindDevice("Vulkan9").status().message(), HasSubstr("Vulkan0"));
}

// Within one family equal ids do not hide each other, and empty ids never match.
TEST(RegistryTest, OnlyEarlierFamiliesHideDevices) {
  Registry registry;
  auto a = std::make_unique<FakeFamily>("A");
  a->Add("A0", DeviceType::kGpu, "uuid:1")
      ->Add("A1", DeviceType::kGpu, "uuid:1")
      ->Add("A2", DeviceType::kGpu, "");
  auto b = std::make_unique<FakeFamily>("B");
  b->Add("B0", DeviceType::kGpu, "")->Add("B1", DeviceType::kGpu, "uuid:1");
  ASSERT_TRUE(registry.Register(std::move(a)).ok());
  ASSERT_TRUE(registry.Register(std::move(b)).ok());
  EXPECT_THAT(Names(registry.devices()), ::testing::ElementsAre("A0", "A1", "A2", "B0"));
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
