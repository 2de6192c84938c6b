// Synchronous copies between host memory and device memory that the host cannot map (and
// device-to-device copies), for the Buffer calls that return when the bytes have arrived:
// one command buffer, a fence and a pinned staging range, reused under a mutex; data larger
// than the staging range goes in chunks. Thread-safe.
#ifndef TENSORGRID_BACKENDS_VULKAN_VK_TRANSFER_H_
#define TENSORGRID_BACKENDS_VULKAN_VK_TRANSFER_H_

#include <vulkan/vulkan.h>

#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "backends/vulkan/vk_memory.h"

namespace tg::vulkan {

class VulkanDevice;

class TransferContext {
 public:
  // Staging bytes per chunk: large enough that per-submit costs vanish behind the copy.
  static constexpr uint64_t kStagingBytes = uint64_t{16} << 20;

  explicit TransferContext(VulkanDevice* device) : device_(device) {}
  ~TransferContext();
  absl::Status Init();

  absl::Status Write(const MemoryRange& dst, uint64_t offset, const void* data, uint64_t size);
  absl::Status Read(const MemoryRange& src, uint64_t offset, void* data, uint64_t size);
  absl::Status Fill(const MemoryRange& dst, uint64_t offset, uint8_t value, uint64_t size);
  absl::Status Copy(const MemoryRange& src, uint64_t src_offset, const MemoryRange& dst,
                    uint64_t dst_offset, uint64_t size);

 private:
  // Records with `record`, submits and waits for the fence.
  absl::Status Run(const std::function<void(VkCommandBuffer)>& record)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  VulkanDevice* device_;
  absl::Mutex mu_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cb_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  MemoryRange staging_;
};

// A barrier that makes every earlier write of the command buffer (transfer or shader) visible
// to every later read or write (transfer, shader or host).
void FullBarrier(VkCommandBuffer cb);

}  // namespace tg::vulkan

#endif  // TENSORGRID_BACKENDS_VULKAN_VK_TRANSFER_H_
