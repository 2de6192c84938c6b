#include "backends/vulkan/vk_memory.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "backends/vulkan/vk_check.h"

namespace tg::vulkan {
namespace {

double MiB(uint64_t bytes) { return static_cast<double>(bytes) / 1048576.0; }

}  // namespace

MemoryPool::MemoryPool(VkDevice device, uint32_t memory_type, bool map, uint64_t max_allocation,
                       std::string what)
    : device_(device),
      memory_type_(memory_type),
      map_(map),
      max_allocation_(max_allocation),
      what_(std::move(what)) {}

MemoryPool::~MemoryPool() {
  absl::MutexLock lock(&mu_);
  for (auto& b : blocks_) Release(b.get());
}

void MemoryPool::Release(MemoryBlock* block) {
  if (block->buffer != VK_NULL_HANDLE) vkDestroyBuffer(device_, block->buffer, nullptr);
  if (block->memory != VK_NULL_HANDLE) vkFreeMemory(device_, block->memory, nullptr);
  block->buffer = VK_NULL_HANDLE;
  block->memory = VK_NULL_HANDLE;
}

absl::StatusOr<std::unique_ptr<MemoryBlock>> MemoryPool::NewBlock(uint64_t size) {
  auto block = std::make_unique<MemoryBlock>(size);
  VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  info.size = size;
  info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
               VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  absl::Status status = [&]() -> absl::Status {
    TG_VK_RETURN_IF_ERROR(vkCreateBuffer(device_, &info, nullptr, &block->buffer));
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(device_, block->buffer, &req);
    if ((req.memoryTypeBits & (1u << memory_type_)) == 0) {
      return absl::InternalError(
          absl::StrFormat("%s: memory type %d cannot hold storage buffers", what_, memory_type_));
    }
    VkMemoryAllocateFlagsInfo flags{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO};
    flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
    VkMemoryAllocateInfo alloc{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    alloc.pNext = &flags;
    alloc.allocationSize = req.size;
    alloc.memoryTypeIndex = memory_type_;
    TG_VK_RETURN_IF_ERROR(vkAllocateMemory(device_, &alloc, nullptr, &block->memory));
    TG_VK_RETURN_IF_ERROR(vkBindBufferMemory(device_, block->buffer, block->memory, 0));
    if (map_) {
      void* p = nullptr;
      TG_VK_RETURN_IF_ERROR(vkMapMemory(device_, block->memory, 0, VK_WHOLE_SIZE, 0, &p));
      block->mapped = static_cast<uint8_t*>(p);
    }
    VkBufferDeviceAddressInfo addr{VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO};
    addr.buffer = block->buffer;
    block->address = vkGetBufferDeviceAddress(device_, &addr);
    return absl::OkStatus();
  }();
  if (!status.ok()) {
    Release(block.get());
    if (absl::IsResourceExhausted(status)) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("%s: cannot allocate a block of %.1f MiB (%.1f MiB held): %s", what_,
                          MiB(size), MiB(AllocatedLocked()), status.message()));
    }
    return status;
  }
  return block;
}

absl::StatusOr<MemoryRange> MemoryPool::Allocate(uint64_t size, uint64_t align) {
  if (size > max_allocation_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: %.1f MiB in one buffer exceed the device's largest allocation of %.1f MiB "
        "(maxMemoryAllocationSize); use smaller buffers or another device",
        what_, MiB(size), MiB(max_allocation_)));
  }
  absl::MutexLock lock(&mu_);
  const bool dedicated = size >= kBlockBytes / 2;
  if (!dedicated) {
    for (auto& b : blocks_) {
      if (b->dedicated) continue;
      if (std::optional<uint64_t> off = b->ranges.Allocate(size, align)) {
        return MemoryRange{b.get(), *off, size};
      }
    }
  }
  const uint64_t block_size =
      dedicated ? std::max<uint64_t>(size, 1) : std::min(kBlockBytes, max_allocation_);
  absl::StatusOr<std::unique_ptr<MemoryBlock>> block = NewBlock(block_size);
  if (!block.ok()) return block.status();
  (*block)->dedicated = dedicated;
  std::optional<uint64_t> off = (*block)->ranges.Allocate(size, align);
  if (!off) return absl::InternalError(absl::StrFormat("%s: fresh block too small", what_));
  blocks_.push_back(std::move(*block));
  return MemoryRange{blocks_.back().get(), *off, size};
}

void MemoryPool::Free(const MemoryRange& range) {
  if (range.block == nullptr) return;
  absl::MutexLock lock(&mu_);
  range.block->ranges.Free(range.offset);
  if (!range.block->ranges.empty()) return;
  // Give empty blocks back: the heap is shared with other devices and processes.
  for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
    if (it->get() == range.block) {
      Release(it->get());
      blocks_.erase(it);
      return;
    }
  }
}

uint64_t MemoryPool::allocated_bytes() const {
  absl::MutexLock lock(&mu_);
  return AllocatedLocked();
}

uint64_t MemoryPool::AllocatedLocked() const {
  uint64_t total = 0;
  for (const auto& b : blocks_) total += b->ranges.capacity();
  return total;
}

}  // namespace tg::vulkan
