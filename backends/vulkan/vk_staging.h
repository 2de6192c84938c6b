// A stream's staging ring: pinned host memory through which asynchronous transfers pass.
// Bytes to upload are copied in when the transfer is queued (so the caller's memory is free
// at once); read-backs land here and are copied out when their submission completes. A range
// is in use until the submission that reads or writes it has retired; Reserve then waits for
// the oldest ones. Used by one stream's thread (see VulkanStream).
#ifndef TENSORGRID_BACKENDS_VULKAN_VK_STAGING_H_
#define TENSORGRID_BACKENDS_VULKAN_VK_STAGING_H_

#include <cstdint>
#include <deque>
#include <functional>

#include "absl/status/statusor.h"
#include "backends/vulkan/vk_memory.h"

namespace tg::vulkan {

class StagingRing {
 public:
  // Capacity: what a decode step moves many times over (tokens, positions, masks, logits);
  // larger transfers go in chunks of half of it.
  static constexpr uint64_t kCapacity = uint64_t{16} << 20;
  static constexpr uint64_t kMaxChunk = kCapacity / 2;

  // `wait(value)` blocks until the owner's submission `value` has retired, submitting the
  // work being recorded first when `value` is that one; `open()` is the value the work being
  // recorded will signal (it changes when a wait submits it).
  using WaitFn = std::function<absl::Status(uint64_t value)>;
  using OpenFn = std::function<uint64_t()>;

  StagingRing(MemoryRange memory, WaitFn wait, OpenFn open)
      : memory_(memory), wait_(std::move(wait)), open_(std::move(open)) {}

  // `size` (<= kMaxChunk) bytes, free until the submission being recorded (after any wait
  // this call does) retires.
  absl::StatusOr<MemoryRange> Reserve(uint64_t size);
  // Forgets ranges of submissions up to `retired`.
  void Release(uint64_t retired);
  const MemoryRange& memory() const { return memory_; }

 private:
  struct Used {
    uint64_t offset, size, value;
  };
  MemoryRange memory_;
  WaitFn wait_;
  OpenFn open_;
  std::deque<Used> used_;  // in ring order, oldest first.
  uint64_t head_ = 0;      // where the next range starts.
};

}  // namespace tg::vulkan

#endif  // TENSORGRID_BACKENDS_VULKAN_VK_STAGING_H_
