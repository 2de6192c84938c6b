// One Vulkan physical device as a tensorgrid Device ("Vulkan0"). Registration reads only the
// physical device's properties; the logical device, its queue, memory pools, transfer context
// and pipelines are made on first use (Ready()), so that tools that never touch the device pay
// nothing. All queue submissions of the device's streams go through QueueSubmit (one queue,
// one lock). A lost device is remembered: every later call fails with UNAVAILABLE instead of
// touching it. Thread-safe.
#ifndef TENSORGRID_BACKENDS_VULKAN_VK_DEVICE_H_
#define TENSORGRID_BACKENDS_VULKAN_VK_DEVICE_H_

#include <vulkan/vulkan.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "backends/vulkan/vk_buffer.h"
#include "backends/vulkan/vk_memory.h"
#include "backends/vulkan/vk_physical.h"
#include "backends/vulkan/vk_pipelines.h"
#include "backends/vulkan/vk_transfer.h"
#include "core/backend.h"

namespace tg::vulkan {

class Timeline;

// Which MUL_MAT kernels a device runs: register-blocked ones for CPU-like devices (lavapipe:
// no shared-memory tiles, barriers or subgroup reductions), tiled and subgroup ones for GPUs.
enum class KernelStyle { kAuto, kCpu, kGpu };

// Whether FLASH_ATTN of few queries (decode) spreads the keys over a workgroup
// (flash_attn_decode.comp) instead of giving each query one invocation (flash_attn.comp).
enum class DecodeAttention { kAuto, kOn, kOff };

struct DeviceOptions {
  // Never map device memory, even where the driver could (lavapipe, integrated GPUs): every
  // transfer then takes the staging path of a discrete GPU. For tests (TG_VULKAN_STAGING=1).
  bool force_staging = false;
  // kAuto: by device type. TG_VULKAN_KERNELS=cpu|gpu forces one (tests of both on lavapipe).
  KernelStyle kernels = KernelStyle::kAuto;
  // kAuto: on for GPUs, off for CPU-type devices (lavapipe). TG_VULKAN_FA_DECODE=1|0 forces
  // it (tests of the decode kernel on lavapipe).
  DecodeAttention decode_attention = DecodeAttention::kAuto;
};

class VulkanDevice : public Device {
 public:
  VulkanDevice(std::string name, PhysicalInfo info, DeviceOptions options = {});
  ~VulkanDevice() override;

  absl::string_view name() const override { return name_; }
  absl::string_view description() const override { return description_; }
  DeviceType type() const override { return info_.type; }
  absl::string_view id() const override { return info_.id; }
  DeviceMemory memory() const override;
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override;
  BufferType* default_buffer_type() override { return &device_type_; }
  BufferType* host_buffer_type() override { return &host_type_; }
  bool SupportsOp(const Tensor& node) const override;
  bool SupportsBufferType(const BufferType* type) const override;
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override;

  // --- For the backend's own classes. -------------------------------------------------------
  // Creates the logical device and what hangs off it, once; later calls return that outcome.
  absl::Status Ready();
  VkDevice vk() const { return device_; }
  const PhysicalInfo& info() const { return info_; }
  MemoryPool& device_memory() { return *device_pool_; }
  MemoryPool& host_memory() { return *host_pool_; }
  // True when device buffers are host-mapped (unified memory, not forced to stage).
  bool device_memory_mapped() const { return device_pool_ && device_pool_->mapped(); }
  // True when MUL_MAT takes the register-blocked kernels (see KernelStyle).
  bool register_kernels() const {
    return options_.kernels == KernelStyle::kCpu ||
           (options_.kernels == KernelStyle::kAuto && info_.cpu_type());
  }
  // True when FLASH_ATTN of few queries takes the decode kernel (see DecodeAttention).
  bool decode_attention() const {
    return options_.decode_attention == DecodeAttention::kOn ||
           (options_.decode_attention == DecodeAttention::kAuto && !info_.cpu_type());
  }
  Pipelines& pipelines() { return *pipelines_; }
  TransferContext& transfers() { return *transfers_; }

  absl::Status QueueSubmit(const VkSubmitInfo& submit, VkFence fence = VK_NULL_HANDLE);
  // A pool of resettable command buffers for the device's queue (the caller destroys it).
  absl::StatusOr<VkCommandPool> CreateCommandPool();
  // One primary command buffer from `pool`.
  absl::StatusOr<VkCommandBuffer> AllocateCommandBuffer(VkCommandPool pool);
  // OK for VK_SUCCESS, else the call's error; VK_ERROR_DEVICE_LOST marks the device lost.
  absl::Status Check(VkResult result, absl::string_view call);
  // UNAVAILABLE once the device is lost.
  absl::Status CheckLost() const;
  // Makes the device behave as lost from now on (tests of the error paths).
  void SimulateLossForTesting() { lost_.store(true); }

  // Streams register their timelines: a synchronous buffer access first waits for all the
  // work they have submitted (as a blocking copy would on a GPU's default stream).
  void AddTimeline(Timeline* t);
  void RemoveTimeline(Timeline* t);
  absl::Status WaitForStreams();

 private:
  absl::Status Init();
  // The memory types of device buffers and of pinned host buffers.
  absl::Status ChooseMemoryTypes(uint32_t* device_type, bool* device_mapped,
                                 uint32_t* host_type) const;

  std::string name_;
  std::string description_;
  PhysicalInfo info_;
  DeviceOptions options_;
  VulkanBufferType device_type_{this, /*host=*/false};
  VulkanBufferType host_type_{this, /*host=*/true};

  absl::Mutex init_mu_;
  bool initialized_ ABSL_GUARDED_BY(init_mu_) = false;
  absl::Status init_status_ ABSL_GUARDED_BY(init_mu_);
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  std::unique_ptr<MemoryPool> device_pool_;
  std::unique_ptr<MemoryPool> host_pool_;
  std::unique_ptr<Pipelines> pipelines_;
  std::unique_ptr<TransferContext> transfers_;

  absl::Mutex queue_mu_;  // vkQueueSubmit needs the queue externally synchronized.
  std::atomic<bool> lost_{false};
  absl::Mutex timelines_mu_;
  std::vector<Timeline*> timelines_ ABSL_GUARDED_BY(timelines_mu_);
};

}  // namespace tg::vulkan

#endif  // TENSORGRID_BACKENDS_VULKAN_VK_DEVICE_H_
