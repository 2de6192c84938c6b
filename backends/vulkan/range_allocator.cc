#include "backends/vulkan/range_allocator.h"

#include <algorithm>

namespace tg::vulkan {

RangeAllocator::RangeAllocator(uint64_t capacity) : capacity_(capacity) {
  if (capacity > 0) free_[0] = capacity;
}

std::optional<uint64_t> RangeAllocator::Allocate(uint64_t size, uint64_t align) {
  size = std::max<uint64_t>(size, 1);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const uint64_t start = it->first;
    const uint64_t end = it->first + it->second;
    const uint64_t aligned = (start + align - 1) & ~(align - 1);
    if (aligned >= end || end - aligned < size) continue;
    free_.erase(it);
    if (aligned > start) free_[start] = aligned - start;
    if (aligned + size < end) free_[aligned + size] = end - aligned - size;
    used_[aligned] = size;
    used_bytes_ += size;
    return aligned;
  }
  return std::nullopt;
}

bool RangeAllocator::Free(uint64_t offset) {
  auto used = used_.find(offset);
  if (used == used_.end()) return false;
  uint64_t start = offset;
  uint64_t size = used->second;
  used_bytes_ -= size;
  used_.erase(used);
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_[start] = size;
  return true;
}

uint64_t RangeAllocator::largest_free() const {
  uint64_t best = 0;
  for (const auto& [offset, size] : free_) best = std::max(best, size);
  return best;
}

}  // namespace tg::vulkan
