// Vulkan memory as tensorgrid buffers. VulkanBufferType hands out device-local memory
// (a range of a MemoryPool block); its Buffer::base() is the range's device address, so a
// placed tensor's `data` is the address its kernels read (buffer device addresses, no
// descriptors). VulkanHostBufferType hands out pinned host memory of the same device: mapped,
// is_host() (the CPU computes on it), and copied from without a staging hop.
// The synchronous Set/Get/Memset/Clear/CopyFrom first wait for the work every stream of the
// device has submitted, then access mapped memory directly or go through the device's
// transfer context. Thread-safety: as core/backend.h.
#ifndef TENSORGRID_BACKENDS_VULKAN_VK_BUFFER_H_
#define TENSORGRID_BACKENDS_VULKAN_VK_BUFFER_H_

#include <memory>
#include <string>

#include "backends/vulkan/vk_memory.h"
#include "core/backend.h"

namespace tg::vulkan {

class VulkanDevice;

// Alignment of device tensors: 256 bytes covers every driver's minStorageBufferOffsetAlignment
// and vector loads of any width.
inline constexpr size_t kDeviceAlignment = 256;
// Pinned host tensors: a cache line, as the CPU backend's.
inline constexpr size_t kHostAlignment = 64;

class VulkanBufferType : public BufferType {
 public:
  VulkanBufferType(VulkanDevice* device, bool host);
  absl::string_view name() const override { return name_; }
  Device* device() const override;
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override;
  size_t alignment() const override { return host_ ? kHostAlignment : kDeviceAlignment; }
  size_t max_size() const override;
  bool is_host() const override { return host_; }
  VulkanDevice* vulkan_device() const { return device_; }

 private:
  VulkanDevice* device_;
  bool host_;
  std::string name_;
};

class VulkanBuffer : public BasicBuffer {
 public:
  VulkanBuffer(VulkanBufferType* type, MemoryRange range, size_t size);
  ~VulkanBuffer() override;
  absl::Status SetTensor(Tensor* t, const void* data, size_t offset, size_t size) override;
  absl::Status GetTensor(const Tensor* t, void* data, size_t offset, size_t size) override;
  absl::Status MemsetTensor(Tensor* t, uint8_t value, size_t offset, size_t size) override;
  absl::Status CopyFrom(const Tensor* src, Tensor* dst) override;
  absl::Status Clear(uint8_t value) override;

  VulkanDevice* device() const { return vulkan_type()->vulkan_device(); }
  const MemoryRange& range() const { return range_; }
  bool host() const { return type()->is_host(); }
  // Byte offset of `p` (an address inside this buffer, as tensors' data are) from its start.
  uint64_t OffsetOf(const void* p) const {
    return reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(base());
  }

 private:
  VulkanBufferType* vulkan_type() const { return static_cast<VulkanBufferType*>(type()); }

  MemoryRange range_;
};

// The VulkanBuffer holding t when it belongs to `device`, else nullptr.
VulkanBuffer* BufferOn(const VulkanDevice* device, const Tensor& t);

}  // namespace tg::vulkan

#endif  // TENSORGRID_BACKENDS_VULKAN_VK_BUFFER_H_
