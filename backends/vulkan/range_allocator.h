// First-fit allocation of aligned byte ranges inside [0, capacity), with neighbouring free
// ranges merged on release. The bookkeeping of MemoryPool's sub-allocation, kept free of
// Vulkan so that it is tested on its own. Not thread-safe (MemoryPool locks around it).
#ifndef TENSORGRID_BACKENDS_VULKAN_RANGE_ALLOCATOR_H_
#define TENSORGRID_BACKENDS_VULKAN_RANGE_ALLOCATOR_H_

#include <cstdint>
#include <map>
#include <optional>

namespace tg::vulkan {

class RangeAllocator {
 public:
  explicit RangeAllocator(uint64_t capacity);

  // The offset of `size` bytes aligned to `align` (a power of two), or nullopt when no free
  // range holds them. size 0 takes one byte, so that every allocation has its own offset.
  std::optional<uint64_t> Allocate(uint64_t size, uint64_t align);
  // Releases the range that Allocate returned at `offset`; false if there is none.
  bool Free(uint64_t offset);

  uint64_t capacity() const { return capacity_; }
  uint64_t used_bytes() const { return used_bytes_; }
  bool empty() const { return used_.empty(); }
  // The largest free range (what the next Allocate with align 1 can get at most).
  uint64_t largest_free() const;

 private:
  uint64_t capacity_;
  uint64_t used_bytes_ = 0;
  std::map<uint64_t, uint64_t> free_;  // offset -> size, no two adjacent.
  std::map<uint64_t, uint64_t> used_;  // offset -> size.
};

}  // namespace tg::vulkan

#endif  // TENSORGRID_BACKENDS_VULKAN_RANGE_ALLOCATOR_H_
