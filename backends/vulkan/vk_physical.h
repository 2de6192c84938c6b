// What a Vulkan physical device is and offers, read once at registration: its name, type, a
// stable id ("pci:dddd:bb:dd.f" from VK_EXT_pci_bus_info, else "uuid:<32 hex digits>"), its
// limits, and whether it has what the backend needs (Vulkan 1.2, buffer device addresses,
// 64-bit integers, 8/16-bit storage, timeline semaphores, subgroup arithmetic, vote and
// shuffle, a compute queue); when it lacks something, `missing` says what. Immutable after Query.
#ifndef TENSORGRID_BACKENDS_VULKAN_VK_PHYSICAL_H_
#define TENSORGRID_BACKENDS_VULKAN_VK_PHYSICAL_H_

#include <vulkan/vulkan.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/backend.h"

namespace tg::vulkan {

struct PhysicalInfo {
  VkPhysicalDevice handle = VK_NULL_HANDLE;
  std::string name;    // "llvmpipe (LLVM 15.0.6, 256 bits)".
  std::string driver;  // "llvmpipe Mesa 22.3.6 (LLVM 15.0.6)".
  VkPhysicalDeviceType vk_type = VK_PHYSICAL_DEVICE_TYPE_OTHER;
  DeviceType type = DeviceType::kGpu;
  std::string id;
  uint32_t api_version = 0;
  uint32_t queue_family = 0;
  uint32_t subgroup_size = 0;
  uint32_t max_shared_memory = 0;  // bytes of shared memory per workgroup.
  uint32_t max_workgroup_invocations = 0;
  uint32_t max_workgroup_count[3] = {};
  uint32_t max_push_constants = 0;
  VkDeviceSize max_allocation = 0;  // maxMemoryAllocationSize.
  uint64_t timestamp_period_ns = 0;
  bool memory_budget = false;  // VK_EXT_memory_budget.
  bool pci_bus_info = false;   // VK_EXT_pci_bus_info.
  bool float64 = false;        // shaderFloat64 (optional: SAMPLE's f64 weights).
  VkPhysicalDeviceMemoryProperties memory{};
  std::string missing;  // empty when usable.

  bool usable() const { return missing.empty(); }
  // CPU-type devices (Mesa lavapipe) are registered only with TG_VULKAN_CPU=1.
  bool cpu_type() const { return vk_type == VK_PHYSICAL_DEVICE_TYPE_CPU; }
};

// Reads every property above of `device`.
PhysicalInfo QueryPhysical(VkPhysicalDevice device);

// Every physical device of the instance, in the driver's order.
std::vector<VkPhysicalDevice> EnumeratePhysical(VkInstance instance);

// "uuid:" + 32 lower-case hex digits.
std::string UuidId(const uint8_t uuid[VK_UUID_SIZE]);
// "pci:dddd:bb:dd.f", lower-case hex, as CUDA's cudaDeviceGetPCIBusId gives it.
std::string PciId(uint32_t domain, uint32_t bus, uint32_t device, uint32_t function);

}  // namespace tg::vulkan

#endif  // TENSORGRID_BACKENDS_VULKAN_VK_PHYSICAL_H_
