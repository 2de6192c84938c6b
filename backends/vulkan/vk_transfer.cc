#include "backends/vulkan/vk_transfer.h"

#include <algorithm>
#include <cstring>

#include "backends/vulkan/vk_check.h"
#include "backends/vulkan/vk_device.h"
#include "core/status_macros.h"

namespace tg::vulkan {
namespace {

// A fence wait gives up after this long (a hung device becomes an error).
constexpr uint64_t kFenceTimeoutNs = uint64_t{300} * 1000 * 1000 * 1000;

}  // namespace

void FullBarrier(VkCommandBuffer cb) {
  VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                          VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
                          VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT |
                           VK_PIPELINE_STAGE_HOST_BIT,
                       0, 1, &barrier, 0, nullptr, 0, nullptr);
}

TransferContext::~TransferContext() {
  VkDevice vk = device_->vk();
  if (vk == VK_NULL_HANDLE) return;
  if (fence_ != VK_NULL_HANDLE) vkDestroyFence(vk, fence_, nullptr);
  if (pool_ != VK_NULL_HANDLE) vkDestroyCommandPool(vk, pool_, nullptr);
  device_->host_memory().Free(staging_);
}

absl::Status TransferContext::Init() {
  TG_ASSIGN_OR_RETURN(pool_, device_->CreateCommandPool());
  TG_ASSIGN_OR_RETURN(cb_, device_->AllocateCommandBuffer(pool_));
  VkFenceCreateInfo fence{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  TG_RETURN_IF_ERROR(
      device_->Check(vkCreateFence(device_->vk(), &fence, nullptr, &fence_), "vkCreateFence"));
  TG_ASSIGN_OR_RETURN(staging_, device_->host_memory().Allocate(kStagingBytes, kDeviceAlignment));
  return absl::OkStatus();
}

absl::Status TransferContext::Run(const std::function<void(VkCommandBuffer)>& record) {
  TG_RETURN_IF_ERROR(device_->CheckLost());
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  TG_RETURN_IF_ERROR(device_->Check(vkBeginCommandBuffer(cb_, &begin), "vkBeginCommandBuffer"));
  record(cb_);
  FullBarrier(cb_);  // the host reads what the copy wrote.
  TG_RETURN_IF_ERROR(device_->Check(vkEndCommandBuffer(cb_), "vkEndCommandBuffer"));
  VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &cb_;
  TG_RETURN_IF_ERROR(device_->QueueSubmit(submit, fence_));
  TG_RETURN_IF_ERROR(device_->Check(
      vkWaitForFences(device_->vk(), 1, &fence_, VK_TRUE, kFenceTimeoutNs), "vkWaitForFences"));
  return device_->Check(vkResetFences(device_->vk(), 1, &fence_), "vkResetFences");
}

absl::Status TransferContext::Write(const MemoryRange& dst, uint64_t offset, const void* data,
                                    uint64_t size) {
  absl::MutexLock lock(&mu_);
  const auto* src = static_cast<const uint8_t*>(data);
  for (uint64_t done = 0; done < size;) {
    const uint64_t n = std::min(kStagingBytes, size - done);
    std::memcpy(staging_.mapped(), src + done, n);
    TG_RETURN_IF_ERROR(Run([&](VkCommandBuffer cb) {
      VkBufferCopy copy{staging_.offset, dst.offset + offset + done, n};
      vkCmdCopyBuffer(cb, staging_.buffer(), dst.buffer(), 1, &copy);
    }));
    done += n;
  }
  return absl::OkStatus();
}

absl::Status TransferContext::Read(const MemoryRange& src, uint64_t offset, void* data,
                                   uint64_t size) {
  absl::MutexLock lock(&mu_);
  auto* out = static_cast<uint8_t*>(data);
  for (uint64_t done = 0; done < size;) {
    const uint64_t n = std::min(kStagingBytes, size - done);
    TG_RETURN_IF_ERROR(Run([&](VkCommandBuffer cb) {
      VkBufferCopy copy{src.offset + offset + done, staging_.offset, n};
      vkCmdCopyBuffer(cb, src.buffer(), staging_.buffer(), 1, &copy);
    }));
    std::memcpy(out + done, staging_.mapped(), n);
    done += n;
  }
  return absl::OkStatus();
}

absl::Status TransferContext::Fill(const MemoryRange& dst, uint64_t offset, uint8_t value,
                                   uint64_t size) {
  absl::MutexLock lock(&mu_);
  std::memset(staging_.mapped(), value, std::min(kStagingBytes, size));
  for (uint64_t done = 0; done < size;) {
    const uint64_t n = std::min(kStagingBytes, size - done);
    TG_RETURN_IF_ERROR(Run([&](VkCommandBuffer cb) {
      VkBufferCopy copy{staging_.offset, dst.offset + offset + done, n};
      vkCmdCopyBuffer(cb, staging_.buffer(), dst.buffer(), 1, &copy);
    }));
    done += n;
  }
  return absl::OkStatus();
}

absl::Status TransferContext::Copy(const MemoryRange& src, uint64_t src_offset,
                                   const MemoryRange& dst, uint64_t dst_offset, uint64_t size) {
  absl::MutexLock lock(&mu_);
  if (size == 0) return absl::OkStatus();
  return Run([&](VkCommandBuffer cb) {
    VkBufferCopy copy{src.offset + src_offset, dst.offset + dst_offset, size};
    vkCmdCopyBuffer(cb, src.buffer(), dst.buffer(), 1, &copy);
  });
}

}  // namespace tg::vulkan
