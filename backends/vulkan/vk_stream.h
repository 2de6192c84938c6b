// VulkanStream: an in-order queue of work on one Vulkan device. Transfers and graphs are
// recorded into an open command buffer; Compute records the whole graph into it (a barrier
// only where a kernel depends on an earlier one, nodes reordered first so that independent
// ones share a barrier interval) and submits it, so the host returns at once and the device
// runs while the host prepares the next step. Each command buffer starts with a barrier
// against everything submitted before it on the device's queue. Asynchronous transfers pass
// through the stream's staging ring; a read-back lands in the caller's memory when its
// submission retires (Synchronize, or an event recorded after it). Events are points on the
// stream's timeline semaphore; another stream of the same device waits for one on the device,
// any other waits on the host. Run-time errors of kernels (an index out of range) come back
// from Synchronize as INVALID_ARGUMENT naming the node. A stream is used by one thread at a
// time; its events may be waited for from any thread.
#ifndef TENSORGRID_BACKENDS_VULKAN_VK_STREAM_H_
#define TENSORGRID_BACKENDS_VULKAN_VK_STREAM_H_

#include <vulkan/vulkan.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "backends/vulkan/vk_memory.h"
#include "backends/vulkan/vk_profile.h"
#include "backends/vulkan/vk_staging.h"
#include "backends/vulkan/vk_timeline.h"
#include "core/backend.h"

namespace tg::vulkan {

class VulkanDevice;

class VulkanEvent : public Event {
 public:
  absl::Status Synchronize() override;
  void Set(std::shared_ptr<Timeline> timeline, uint64_t value) {
    timeline_ = std::move(timeline);
    value_ = value;
  }
  const std::shared_ptr<Timeline>& timeline() const { return timeline_; }
  uint64_t value() const { return value_; }

 private:
  std::shared_ptr<Timeline> timeline_;  // nullptr: never recorded (already happened).
  uint64_t value_ = 0;
};

class VulkanStream : public Stream {
 public:
  static absl::StatusOr<std::unique_ptr<VulkanStream>> Create(VulkanDevice* device);
  ~VulkanStream() override;

  Device* device() const override;
  absl::Status SetTensorAsync(Tensor* t, const void* data, size_t offset, size_t size) override;
  absl::Status GetTensorAsync(const Tensor* t, void* data, size_t offset, size_t size) override;
  absl::Status CopyTensorAsync(const Tensor* src, Tensor* dst) override;
  absl::Status Synchronize() override;
  absl::Status Compute(Graph& graph) override;
  absl::Status RecordEvent(Event* event) override;
  absl::Status WaitEvent(Event* event) override;
  absl::Status OptimizeGraph(Graph& graph) override;

  // Barriers and dispatches of the last Compute (tests, benchmarks).
  int last_barriers() const { return last_barriers_; }
  int last_dispatches() const { return last_dispatches_; }

 private:
  // Descriptions of the nodes that may report run-time errors, by error tag.
  struct ErrorNames {
    absl::Mutex mu;
    absl::flat_hash_map<uint32_t, std::string> names;
  };
  enum class Last { kStart, kTransfer, kCompute };

  explicit VulkanStream(VulkanDevice* device) : device_(device) {}
  absl::Status Init();
  // The open command buffer (begun, with its leading barrier), opening one if needed.
  absl::StatusOr<VkCommandBuffer> Open();
  // A barrier before a transfer command, when anything precedes it in the buffer.
  absl::StatusOr<VkCommandBuffer> OpenForTransfer();
  // Submits the open command buffer, if any.
  absl::Status Flush();
  // The value the open (or next) command buffer will signal.
  uint64_t open_value() const { return timeline_->last_submitted() + 1; }
  // Waits until submission `value` retired (submitting first when it is the open one).
  absl::Status WaitFor(uint64_t value, bool take_error);
  absl::Status EnsureScratch(uint64_t bytes);
  // Device buffer and byte offset of t (on this device), for copy commands.
  absl::Status Locate(const Tensor* t, VkBuffer* buffer, uint64_t* offset) const;
  absl::Status CheckValidation();
  // Checks and clears the error slot (runs as a completion step).
  absl::Status TakeKernelError(const std::vector<uint32_t>& tags);

  VulkanDevice* device_;
  std::shared_ptr<Timeline> timeline_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  std::vector<VkCommandBuffer> free_cbs_;
  VkCommandBuffer open_ = VK_NULL_HANDLE;
  Last last_ = Last::kStart;
  std::vector<Timeline::Completion> open_done_;
  std::vector<SemaphoreWait> open_waits_;
  std::vector<uint32_t> open_error_tags_;
  std::unique_ptr<StagingRing> ring_;
  MemoryRange ring_memory_;
  MemoryRange scratch_;
  MemoryRange error_slot_;
  std::shared_ptr<ErrorNames> error_names_ = std::make_shared<ErrorNames>();
  uint32_t next_error_tag_ = 1;
  int64_t validation_seen_ = 0;
  std::unique_ptr<Profiler> profiler_;  // TG_VULKAN_PROFILE=1 only.
  int last_barriers_ = 0;
  int last_dispatches_ = 0;
};

}  // namespace tg::vulkan

#endif  // TENSORGRID_BACKENDS_VULKAN_VK_STREAM_H_
