#include "backends/vulkan/vk_recorder.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backends/vulkan/vk_buffer.h"
#include "backends/vulkan/vk_device.h"
#include "backends/vulkan/vk_profile.h"
#include "core/status_macros.h"

namespace tg::vulkan {
namespace {

bool AnyOverlap(const std::vector<AddressRange>& set, const AddressRange& r) {
  for (const AddressRange& s : set) {
    if (s.Overlaps(r)) return true;
  }
  return false;
}

void ComputeBarrier(VkCommandBuffer cb) {
  VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
  vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                       VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &barrier, 0, nullptr, 0,
                       nullptr);
}

}  // namespace

Recorder::Recorder(VulkanDevice* device, VkCommandBuffer cb, uint64_t scratch_address,
                   uint64_t scratch_bytes, uint64_t error_address, uint32_t first_error_tag)
    : device_(device),
      cb_(cb),
      scratch_address_(scratch_address),
      scratch_bytes_(scratch_bytes),
      error_address_(error_address),
      first_error_tag_(first_error_tag) {}

uint64_t Recorder::Address(const Tensor* t) const {
  const VulkanBuffer* b = BufferOn(device_, *t);
  if (b == nullptr) return 0;
  return b->range().address() + b->OffsetOf(t->data);
}

AddressRange Recorder::Range(const Tensor* t) const {
  const uint64_t a = Address(t);
  return {a, a + std::max<uint64_t>(t->NumBytes(), 1)};
}

absl::Status Recorder::Dispatch(absl::string_view shader, absl::Span<const uint32_t> spec,
                                const void* pc, size_t pc_bytes, const uint32_t groups[3],
                                absl::Span<const AddressRange> reads,
                                absl::Span<const AddressRange> writes) {
  if (pc_bytes > kPushConstantBytes) {
    return absl::InternalError(absl::StrCat("Vulkan: ", shader, " pushes ", pc_bytes, " bytes"));
  }
  TG_ASSIGN_OR_RETURN(VkPipeline pipeline, device_->pipelines().Get(shader, spec));
  bool hazard = false;
  for (const AddressRange& r : reads) hazard = hazard || AnyOverlap(written_, r);
  for (const AddressRange& w : writes) {
    hazard = hazard || AnyOverlap(written_, w) || AnyOverlap(read_, w);
  }
  if (hazard) {
    ComputeBarrier(cb_);
    ++barriers_;
    written_.clear();
    read_.clear();
  }
  read_.insert(read_.end(), reads.begin(), reads.end());
  written_.insert(written_.end(), writes.begin(), writes.end());
  if (converted_.valid) {
    for (const AddressRange& w : writes) {
      if (w.Overlaps(converted_.source) || w.Overlaps(converted_.converted))
        converted_.valid = false;
    }
  }
  if (pipeline != bound_) {
    vkCmdBindPipeline(cb_, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
    bound_ = pipeline;
  }
  if (pc_bytes > 0) {
    vkCmdPushConstants(cb_, device_->pipelines().layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0,
                       static_cast<uint32_t>(pc_bytes), pc);
  }
  if (profiler_ != nullptr) {
    profiler_->Before(
        cb_, absl::StrCat(shader, spec.size() > 1 ? "/" : "", absl::StrJoin(spec.subspan(1), ",")));
  }
  vkCmdDispatch(cb_, groups[0], groups[1], groups[2]);
  if (profiler_ != nullptr) profiler_->After(cb_);
  ++dispatches_;
  return absl::OkStatus();
}

absl::Status Recorder::Dispatch1D(absl::string_view shader, absl::Span<const uint32_t> spec,
                                  const void* pc, size_t pc_bytes, uint64_t groups,
                                  absl::Span<const AddressRange> reads,
                                  absl::Span<const AddressRange> writes) {
  if (groups == 0) return absl::OkStatus();
  const uint64_t max_x = device_->info().max_workgroup_count[0];
  uint32_t g[3] = {static_cast<uint32_t>(std::min(groups, max_x)),
                   static_cast<uint32_t>((groups + max_x - 1) / max_x), 1};
  if (g[1] > device_->info().max_workgroup_count[1]) {
    return absl::InvalidArgumentError(
        absl::StrCat(device_->name(), ": ", groups, " workgroups are more than the device runs"));
  }
  return Dispatch(shader, spec, pc, pc_bytes, g, reads, writes);
}

absl::StatusOr<AddressRange> Recorder::Scratch(int slot, uint64_t bytes) const {
  const uint64_t half = scratch_bytes_ / 2;
  if (bytes > half) {
    return absl::InternalError(absl::StrCat("Vulkan: scratch of ", bytes, " bytes, have ", half));
  }
  const uint64_t a = scratch_address_ + static_cast<uint64_t>(slot) * half;
  return AddressRange{a, a + std::max<uint64_t>(bytes, 1)};
}

uint32_t Recorder::ErrorTag(const Tensor* node) {
  error_nodes_.push_back(DescribeTensor(*node));
  return first_error_tag_ + static_cast<uint32_t>(error_nodes_.size()) - 1;
}

}  // namespace tg::vulkan
