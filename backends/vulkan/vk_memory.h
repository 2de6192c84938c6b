// Device memory sub-allocation. Drivers limit how many VkDeviceMemory objects may exist
// (maxMemoryAllocationCount, 4096 on many), so a MemoryPool takes large blocks (kBlockBytes,
// or one block of exactly the size for requests of half a block or more) and hands out
// aligned ranges of them. Each block is one VkBuffer over all of its memory, usable as a
// storage buffer by its device address and as a copy source/destination; a range is
// (block, offset). Host-visible blocks stay mapped. Thread-safe.
#ifndef TENSORGRID_BACKENDS_VULKAN_VK_MEMORY_H_
#define TENSORGRID_BACKENDS_VULKAN_VK_MEMORY_H_

#include <vulkan/vulkan.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backends/vulkan/range_allocator.h"

namespace tg::vulkan {

// A block of device memory with its whole-range buffer.
struct MemoryBlock {
  VkDeviceMemory memory = VK_NULL_HANDLE;
  VkBuffer buffer = VK_NULL_HANDLE;
  uint64_t address = 0;       // device address of byte 0.
  uint8_t* mapped = nullptr;  // host address of byte 0 when host-visible, else nullptr.
  bool dedicated = false;     // holds one large range; never shared.
  RangeAllocator ranges;
  explicit MemoryBlock(uint64_t size) : ranges(size) {}
};

// A range of a block. Copyable handle; the pool owns the memory.
struct MemoryRange {
  MemoryBlock* block = nullptr;
  uint64_t offset = 0;
  uint64_t size = 0;

  VkBuffer buffer() const { return block->buffer; }
  uint64_t address() const { return block->address + offset; }
  uint8_t* mapped() const { return block->mapped ? block->mapped + offset : nullptr; }
};

class MemoryPool {
 public:
  // Default block size: large enough that a model's weights, KV cache and compute buffers
  // take a handful of allocations, small enough not to strand much of a small heap.
  static constexpr uint64_t kBlockBytes = uint64_t{256} << 20;

  // `what` names the pool in errors ("Vulkan0 device memory").
  MemoryPool(VkDevice device, uint32_t memory_type, bool map, uint64_t max_allocation,
             std::string what);
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // RESOURCE_EXHAUSTED naming the size and the limit when it cannot be had.
  absl::StatusOr<MemoryRange> Allocate(uint64_t size, uint64_t align);
  void Free(const MemoryRange& range);

  uint64_t allocated_bytes() const;  // held in blocks from the driver.
  bool mapped() const { return map_; }

 private:
  absl::StatusOr<std::unique_ptr<MemoryBlock>> NewBlock(uint64_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Release(MemoryBlock* block);
  uint64_t AllocatedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  VkDevice device_;
  uint32_t memory_type_;
  bool map_;
  uint64_t max_allocation_;
  std::string what_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<MemoryBlock>> blocks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tg::vulkan

#endif  // TENSORGRID_BACKENDS_VULKAN_VK_MEMORY_H_
