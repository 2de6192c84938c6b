#include "backends/vulkan/vk_physical.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace tg::vulkan {
namespace {

bool HasExtension(VkPhysicalDevice device, const char* name) {
  uint32_t n = 0;
  if (vkEnumerateDeviceExtensionProperties(device, nullptr, &n, nullptr) != VK_SUCCESS) {
    return false;
  }
  std::vector<VkExtensionProperties> props(n);
  if (vkEnumerateDeviceExtensionProperties(device, nullptr, &n, props.data()) != VK_SUCCESS) {
    return false;
  }
  for (const auto& p : props) {
    if (std::strcmp(p.extensionName, name) == 0) return true;
  }
  return false;
}

DeviceType TypeOf(VkPhysicalDeviceType type) {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return DeviceType::kGpu;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
    // lavapipe shares the host's memory like an integrated GPU (ggml calls it one, too); the
    // host's own CPU device stays the registry's CPU.
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return DeviceType::kIgpu;
    default:
      return DeviceType::kAccel;
  }
}

// The first queue family that can compute (every compute queue can also transfer).
bool FindComputeQueue(VkPhysicalDevice device, uint32_t* family) {
  uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(device, &n, nullptr);
  std::vector<VkQueueFamilyProperties> props(n);
  vkGetPhysicalDeviceQueueFamilyProperties(device, &n, props.data());
  for (uint32_t i = 0; i < n; ++i) {
    if (props[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
      *family = i;
      return true;
    }
  }
  return false;
}

}  // namespace

std::string UuidId(const uint8_t uuid[VK_UUID_SIZE]) {
  std::string out = "uuid:";
  for (uint32_t i = 0; i < VK_UUID_SIZE; ++i) absl::StrAppendFormat(&out, "%02x", uuid[i]);
  return out;
}

std::string PciId(uint32_t domain, uint32_t bus, uint32_t device, uint32_t function) {
  return absl::StrFormat("pci:%04x:%02x:%02x.%x", domain, bus, device, function);
}

std::vector<VkPhysicalDevice> EnumeratePhysical(VkInstance instance) {
  uint32_t n = 0;
  if (vkEnumeratePhysicalDevices(instance, &n, nullptr) != VK_SUCCESS) return {};
  std::vector<VkPhysicalDevice> devices(n);
  if (vkEnumeratePhysicalDevices(instance, &n, devices.data()) != VK_SUCCESS) return {};
  devices.resize(n);
  return devices;
}

PhysicalInfo QueryPhysical(VkPhysicalDevice device) {
  PhysicalInfo info;
  info.handle = device;
  info.pci_bus_info = HasExtension(device, VK_EXT_PCI_BUS_INFO_EXTENSION_NAME);
  info.memory_budget = HasExtension(device, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);

  VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  VkPhysicalDeviceVulkan11Properties p11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES};
  VkPhysicalDeviceVulkan12Properties p12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_PROPERTIES};
  VkPhysicalDevicePCIBusInfoPropertiesEXT pci{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PCI_BUS_INFO_PROPERTIES_EXT};
  props.pNext = &p11;
  p11.pNext = &p12;
  if (info.pci_bus_info) p12.pNext = &pci;
  vkGetPhysicalDeviceProperties2(device, &props);
  const VkPhysicalDeviceLimits& limits = props.properties.limits;
  info.name = props.properties.deviceName;
  info.driver = absl::StrCat(p12.driverName, " ", p12.driverInfo);
  info.vk_type = props.properties.deviceType;
  info.type = TypeOf(info.vk_type);
  info.api_version = props.properties.apiVersion;
  info.id = info.pci_bus_info ? PciId(pci.pciDomain, pci.pciBus, pci.pciDevice, pci.pciFunction)
                              : UuidId(p11.deviceUUID);
  info.subgroup_size = p11.subgroupSize;
  info.max_shared_memory = limits.maxComputeSharedMemorySize;
  info.max_workgroup_invocations = limits.maxComputeWorkGroupInvocations;
  for (int i = 0; i < 3; ++i) info.max_workgroup_count[i] = limits.maxComputeWorkGroupCount[i];
  info.max_push_constants = limits.maxPushConstantsSize;
  info.max_allocation = p11.maxMemoryAllocationSize;
  vkGetPhysicalDeviceMemoryProperties(device, &info.memory);

  VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  features.pNext = &f11;
  f11.pNext = &f12;
  vkGetPhysicalDeviceFeatures2(device, &features);

  info.float64 = features.features.shaderFloat64 == VK_TRUE;

  std::vector<std::string> missing;
  if (info.api_version < VK_API_VERSION_1_2) missing.push_back("Vulkan 1.2");
  if (!f12.bufferDeviceAddress) missing.push_back("bufferDeviceAddress");
  if (!f12.timelineSemaphore) missing.push_back("timelineSemaphore");
  if (!f12.storageBuffer8BitAccess) missing.push_back("storageBuffer8BitAccess");
  if (!f11.storageBuffer16BitAccess) missing.push_back("storageBuffer16BitAccess");
  if (!features.features.shaderInt64) missing.push_back("shaderInt64");
  constexpr VkSubgroupFeatureFlags kSubgroupOps =
      VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT |
      VK_SUBGROUP_FEATURE_VOTE_BIT | VK_SUBGROUP_FEATURE_SHUFFLE_BIT;
  if ((p11.subgroupSupportedOperations & kSubgroupOps) != kSubgroupOps ||
      (p11.subgroupSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT) == 0) {
    missing.push_back("subgroup arithmetic, vote and shuffle in compute shaders");
  }
  if (limits.maxPushConstantsSize < 128) missing.push_back("128 bytes of push constants");
  if (!FindComputeQueue(device, &info.queue_family)) missing.push_back("a compute queue");
  info.missing = absl::StrJoin(missing, ", ");
  return info;
}

}  // namespace tg::vulkan
