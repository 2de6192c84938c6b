// Compute pipelines, created on first use from the embedded SPIR-V and kept for the life of
// the device. A pipeline is a shader plus its specialization constants: constant 0 is the
// workgroup size, the others are the shader's own (a weight type, a tile shape, the subgroup
// size). Every pipeline shares one layout: 128 bytes of push constants and no descriptors,
// since kernels reach tensors through buffer device addresses. Creation is where Mesa compiles
// (cached on disk in MESA_SHADER_CACHE_DIR), so the set of variants is kept small.
// Thread-safe.
#ifndef TENSORGRID_BACKENDS_VULKAN_VK_PIPELINES_H_
#define TENSORGRID_BACKENDS_VULKAN_VK_PIPELINES_H_

#include <vulkan/vulkan.h>

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace tg::vulkan {

class VulkanDevice;

// The push-constant bytes every kernel may use (the minimum every device offers).
inline constexpr uint32_t kPushConstantBytes = 128;

class Pipelines {
 public:
  explicit Pipelines(VulkanDevice* device) : device_(device) {}
  ~Pipelines();
  Pipelines(const Pipelines&) = delete;
  Pipelines& operator=(const Pipelines&) = delete;

  absl::Status Init();
  VkPipelineLayout layout() const { return layout_; }
  // The pipeline of `shader` with specialization constants spec[i] at constant_id i.
  absl::StatusOr<VkPipeline> Get(absl::string_view shader, absl::Span<const uint32_t> spec);
  int count() const;

 private:
  VulkanDevice* device_;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, VkShaderModule> modules_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, VkPipeline> pipelines_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tg::vulkan

#endif  // TENSORGRID_BACKENDS_VULKAN_VK_PIPELINES_H_
