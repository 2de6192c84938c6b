#include "backends/vulkan/vk_family.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "backends/vulkan/vk_instance.h"
#include "core/status_macros.h"

namespace tg::vulkan {
namespace {

bool EnvIsOne(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace

std::vector<Device*> VulkanFamily::devices() {
  std::vector<Device*> out;
  for (auto& d : devices_) out.push_back(d.get());
  return out;
}

absl::StatusOr<std::vector<std::unique_ptr<VulkanDevice>>> DiscoverDevices() {
  std::vector<std::unique_ptr<VulkanDevice>> devices;
  absl::StatusOr<Instance*> instance = Instance::Get();
  if (!instance.ok()) {
    // No loader or driver is normal on a machine without a GPU: no devices. A validation
    // request that cannot be met is the user's error and must not pass silently.
    if (absl::IsFailedPrecondition(instance.status())) return instance.status();
    return devices;
  }
  const bool with_cpu = EnvIsOne("TG_VULKAN_CPU");
  DeviceOptions options;
  options.force_staging = EnvIsOne("TG_VULKAN_STAGING");
  if (const char* k = std::getenv("TG_VULKAN_KERNELS"); k != nullptr) {
    if (std::strcmp(k, "cpu") == 0) options.kernels = KernelStyle::kCpu;
    if (std::strcmp(k, "gpu") == 0) options.kernels = KernelStyle::kGpu;
  }
  if (const char* d = std::getenv("TG_VULKAN_FA_DECODE"); d != nullptr) {
    if (std::strcmp(d, "1") == 0) options.decode_attention = DecodeAttention::kOn;
    if (std::strcmp(d, "0") == 0) options.decode_attention = DecodeAttention::kOff;
  }
  for (VkPhysicalDevice handle : EnumeratePhysical((*instance)->handle())) {
    PhysicalInfo info = QueryPhysical(handle);
    if (info.cpu_type() && !with_cpu) continue;
    if (!info.usable()) {
      std::fprintf(stderr, "vulkan: skipping %s: it lacks %s\n", info.name.c_str(),
                   info.missing.c_str());
      continue;
    }
    const std::string name = absl::StrCat("Vulkan", devices.size());
    devices.push_back(std::make_unique<VulkanDevice>(name, std::move(info), options));
  }
  return devices;
}

absl::Status RegisterVulkanFamily() {
  static absl::Mutex mu(absl::kConstInit);
  static bool done = false;  // discovery runs once, devices or not.
  absl::MutexLock lock(&mu);
  if (done || Registry::Get().HasFamily("Vulkan")) return absl::OkStatus();
  done = true;
  TG_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<VulkanDevice>> devices, DiscoverDevices());
  if (devices.empty()) {
    Instance::Release();  // nothing uses the driver: unload it.
    return absl::OkStatus();
  }
  return Registry::Get().Register(std::make_unique<VulkanFamily>(std::move(devices)));
}

}  // namespace tg::vulkan
