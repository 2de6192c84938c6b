#include "backends/vulkan/vk_pipelines.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backends/vulkan/vk_device.h"
#include "backends/vulkan/vk_shaders.h"
#include "core/status_macros.h"

namespace tg::vulkan {

Pipelines::~Pipelines() {
  VkDevice vk = device_->vk();
  if (vk == VK_NULL_HANDLE) return;
  absl::MutexLock lock(&mu_);
  for (auto& [key, p] : pipelines_) vkDestroyPipeline(vk, p, nullptr);
  for (auto& [key, m] : modules_) vkDestroyShaderModule(vk, m, nullptr);
  if (cache_ != VK_NULL_HANDLE) vkDestroyPipelineCache(vk, cache_, nullptr);
  if (layout_ != VK_NULL_HANDLE) vkDestroyPipelineLayout(vk, layout_, nullptr);
}

absl::Status Pipelines::Init() {
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushConstantBytes};
  VkPipelineLayoutCreateInfo info{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  info.pushConstantRangeCount = 1;
  info.pPushConstantRanges = &range;
  TG_RETURN_IF_ERROR(device_->Check(vkCreatePipelineLayout(device_->vk(), &info, nullptr, &layout_),
                                    "vkCreatePipelineLayout"));
  VkPipelineCacheCreateInfo cache{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  return device_->Check(vkCreatePipelineCache(device_->vk(), &cache, nullptr, &cache_),
                        "vkCreatePipelineCache");
}

int Pipelines::count() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(pipelines_.size());
}

absl::StatusOr<VkPipeline> Pipelines::Get(absl::string_view shader,
                                          absl::Span<const uint32_t> spec) {
  const std::string key = absl::StrCat(shader, ":", absl::StrJoin(spec, ","));
  absl::MutexLock lock(&mu_);
  if (auto it = pipelines_.find(key); it != pipelines_.end()) return it->second;
  VkShaderModule module = VK_NULL_HANDLE;
  if (auto it = modules_.find(shader); it != modules_.end()) {
    module = it->second;
  } else {
    const ShaderBlob* blob = nullptr;
    for (const ShaderBlob& b : EmbeddedShaders()) {
      if (shader == b.name) blob = &b;
    }
    if (blob == nullptr) {
      return absl::InternalError(absl::StrCat("Vulkan: shader '", shader, "' is not embedded"));
    }
    VkShaderModuleCreateInfo info{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    info.codeSize = blob->bytes;
    info.pCode = blob->words;
    TG_RETURN_IF_ERROR(device_->Check(vkCreateShaderModule(device_->vk(), &info, nullptr, &module),
                                      "vkCreateShaderModule"));
    modules_[std::string(shader)] = module;
  }
  std::vector<VkSpecializationMapEntry> entries(spec.size());
  for (size_t i = 0; i < spec.size(); ++i) {
    entries[i] = {static_cast<uint32_t>(i), static_cast<uint32_t>(i * sizeof(uint32_t)),
                  sizeof(uint32_t)};
  }
  VkSpecializationInfo spec_info{static_cast<uint32_t>(entries.size()), entries.data(),
                                 spec.size() * sizeof(uint32_t), spec.data()};
  VkComputePipelineCreateInfo info{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  info.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  info.stage.module = module;
  info.stage.pName = "main";
  info.stage.pSpecializationInfo = &spec_info;
  info.layout = layout_;
  VkPipeline pipeline = VK_NULL_HANDLE;
  TG_RETURN_IF_ERROR(
      device_->Check(vkCreateComputePipelines(device_->vk(), cache_, 1, &info, nullptr, &pipeline),
                     "vkCreateComputePipelines"));
  pipelines_[key] = pipeline;
  return pipeline;
}

}  // namespace tg::vulkan
