// Device time per kernel, for finding where a graph's time goes (TG_VULKAN_PROFILE=1):
// timestamps before and after every dispatch of a stream, summed per kernel variant over the
// process and printed on stderr when it exits. A profiled stream waits for each graph it
// submits (the query pool is reused), so profile runs are slower; the per-kernel shares hold.
// Used by one stream's thread.
#ifndef TENSORGRID_BACKENDS_VULKAN_VK_PROFILE_H_
#define TENSORGRID_BACKENDS_VULKAN_VK_PROFILE_H_

#include <vulkan/vulkan.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace tg::vulkan {

class VulkanDevice;

class Profiler {
 public:
  // nullptr unless TG_VULKAN_PROFILE=1 (or the pool cannot be made).
  static std::unique_ptr<Profiler> CreateIfEnabled(VulkanDevice* device);
  ~Profiler();

  void Begin(VkCommandBuffer cb);  // before a graph's first dispatch.
  void Before(VkCommandBuffer cb, std::string label);
  void After(VkCommandBuffer cb);
  // Adds the timings of the graph recorded since Begin (its submission has completed).
  absl::Status Collect();

 private:
  // Queries per graph: two per dispatch; graphs with more dispatches are cut short.
  static constexpr uint32_t kMaxQueries = 8192;
  explicit Profiler(VulkanDevice* device) : device_(device) {}

  VulkanDevice* device_;
  VkQueryPool pool_ = VK_NULL_HANDLE;
  uint32_t used_ = 0;
  std::vector<std::string> labels_;
  double period_ns_ = 1;
};

}  // namespace tg::vulkan

#endif  // TENSORGRID_BACKENDS_VULKAN_VK_PROFILE_H_
