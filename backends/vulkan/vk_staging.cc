#include "backends/vulkan/vk_staging.h"

#include "core/status_macros.h"

namespace tg::vulkan {
namespace {

// Staged ranges start on this boundary (vector-friendly host copies, copy offsets aligned).
constexpr uint64_t kAlign = 256;

}  // namespace

void StagingRing::Release(uint64_t retired) {
  while (!used_.empty() && used_.front().value <= retired) used_.pop_front();
  if (used_.empty()) head_ = 0;
}

absl::StatusOr<MemoryRange> StagingRing::Reserve(uint64_t size) {
  const uint64_t cap = memory_.size;
  size = (std::max<uint64_t>(size, 1) + kAlign - 1) / kAlign * kAlign;
  if (size > cap) return absl::InternalError("staging request larger than the ring");
  for (;;) {
    // Free space: from head_ to the oldest used range (or to the end, then from 0).
    uint64_t start = head_;
    bool fits;
    if (used_.empty()) {
      start = 0;
      fits = true;
    } else {
      const uint64_t tail = used_.front().offset;
      if (head_ > tail) {  // used occupies [tail, head_): room at the end or at the front.
        if (cap - head_ >= size) {
          fits = true;
        } else {
          start = 0;
          fits = tail >= size;
        }
      } else {  // wrapped: used occupies [tail, cap) and [0, head_).
        fits = tail - head_ >= size;
      }
    }
    if (fits) {
      used_.push_back({start, size, open_()});
      head_ = start + size;
      MemoryRange r = memory_;
      r.offset = memory_.offset + start;
      r.size = size;
      return r;
    }
    const uint64_t oldest = used_.front().value;
    TG_RETURN_IF_ERROR(wait_(oldest));
    Release(oldest);
  }
}

}  // namespace tg::vulkan
