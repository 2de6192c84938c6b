// The Vulkan device family: every usable Vulkan physical device as Vulkan0..N, in the
// driver's order. CPU-type devices (Mesa lavapipe) join only with TG_VULKAN_CPU=1, so users get
// real GPUs while tests can run on any machine; TG_VULKAN_STAGING=1 makes the devices stage
// every transfer as a discrete GPU would, TG_VULKAN_KERNELS=cpu|gpu picks the MUL_MAT kernels
// of either kind of device (KernelStyle), TG_VULKAN_FA_DECODE=1|0 the FLASH_ATTN decode kernel
// (DecodeAttention). Thread-safe.
#ifndef TENSORGRID_BACKENDS_VULKAN_VK_FAMILY_H_
#define TENSORGRID_BACKENDS_VULKAN_VK_FAMILY_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "backends/vulkan/vk_device.h"
#include "core/registry.h"

namespace tg::vulkan {

class VulkanFamily : public DeviceFamily {
 public:
  explicit VulkanFamily(std::vector<std::unique_ptr<VulkanDevice>> devices)
      : devices_(std::move(devices)) {}
  absl::string_view name() const override { return "Vulkan"; }
  std::vector<Device*> devices() override;

 private:
  std::vector<std::unique_ptr<VulkanDevice>> devices_;
};

// The devices the family would register (reads the TG_VULKAN_* variables above). Empty
// when there is no Vulkan driver; an error only when TG_VULKAN_VALIDATION=1 cannot be met.
absl::StatusOr<std::vector<std::unique_ptr<VulkanDevice>>> DiscoverDevices();

// Registers the family with the process registry once, when it has devices.
absl::Status RegisterVulkanFamily();

}  // namespace tg::vulkan

#endif  // TENSORGRID_BACKENDS_VULKAN_VK_FAMILY_H_
