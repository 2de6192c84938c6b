// The submissions of one stream: a timeline semaphore whose value counts finished command
// buffers, and per submission a completion step (copying read-back bytes to their caller,
// checking kernels' run-time errors) that runs on whichever host thread first sees the
// submission done, before the submission counts as retired. Events hold a shared_ptr to the
// timeline they were recorded on, so they outlive their stream. Thread-safe.
#ifndef TENSORGRID_BACKENDS_VULKAN_VK_TIMELINE_H_
#define TENSORGRID_BACKENDS_VULKAN_VK_TIMELINE_H_

#include <vulkan/vulkan.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace tg::vulkan {

class VulkanDevice;

// A device-side wait before a submission runs: `semaphore` reaching `value`.
struct SemaphoreWait {
  VkSemaphore semaphore;
  uint64_t value;
};

class Timeline {
 public:
  using Completion = std::function<absl::Status()>;

  static absl::StatusOr<std::shared_ptr<Timeline>> Create(VulkanDevice* device);
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  VkSemaphore semaphore() const { return semaphore_; }
  VulkanDevice* device() const { return device_; }
  uint64_t last_submitted() const;
  uint64_t retired() const;

  // Submits `cb` after `waits`; it signals last_submitted() + 1, which is returned. `done`
  // (may be empty) runs once it has finished.
  absl::StatusOr<uint64_t> Submit(VkCommandBuffer cb, absl::Span<const SemaphoreWait> waits,
                                  Completion done);
  // Blocks until submission `value` has finished and been retired (completions run in order).
  // With take_error, also returns (and clears) the first error a completion reported since
  // the last call that took one.
  absl::Status Wait(uint64_t value, bool take_error = true);
  // Retires what has finished, without blocking.
  absl::Status Poll();
  // Command buffers of retired submissions, for the stream to record again.
  std::vector<VkCommandBuffer> TakeRetiredCommandBuffers();

 private:
  explicit Timeline(VulkanDevice* device) : device_(device) {}
  // Runs the completions of submissions up to `done` (the semaphore's value).
  void RetireLocked(uint64_t done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct Pending {
    uint64_t value;
    VkCommandBuffer cb;
    Completion done;
  };

  VulkanDevice* device_;
  VkSemaphore semaphore_ = VK_NULL_HANDLE;
  mutable absl::Mutex mu_;
  uint64_t submitted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t retired_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  std::vector<VkCommandBuffer> free_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tg::vulkan

#endif  // TENSORGRID_BACKENDS_VULKAN_VK_TIMELINE_H_
