#include "backends/vulkan/vk_device.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "backends/vulkan/vk_check.h"
#include "backends/vulkan/vk_instance.h"
#include "backends/vulkan/vk_ops.h"
#include "backends/vulkan/vk_stream.h"
#include "backends/vulkan/vk_timeline.h"
#include "core/status_macros.h"

namespace tg::vulkan {
namespace {

constexpr VkMemoryPropertyFlags kHostFlags =
    VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;

// The memory type bits a block's buffer accepts (asked of a throwaway buffer).
absl::StatusOr<uint32_t> BufferMemoryTypeBits(VulkanDevice* device) {
  VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  info.size = 4096;
  info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
               VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
  VkBuffer buffer = VK_NULL_HANDLE;
  TG_RETURN_IF_ERROR(
      device->Check(vkCreateBuffer(device->vk(), &info, nullptr, &buffer), "vkCreateBuffer"));
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(device->vk(), buffer, &req);
  vkDestroyBuffer(device->vk(), buffer, nullptr);
  return req.memoryTypeBits;
}

}  // namespace

VulkanDevice::VulkanDevice(std::string name, PhysicalInfo info, DeviceOptions options)
    : name_(std::move(name)),
      description_(absl::StrCat(info.name, " (", info.driver, ")")),
      info_(std::move(info)),
      options_(options) {}

VulkanDevice::~VulkanDevice() {
  if (device_ == VK_NULL_HANDLE) return;
  vkDeviceWaitIdle(device_);
  transfers_.reset();
  pipelines_.reset();
  host_pool_.reset();
  device_pool_.reset();
  vkDestroyDevice(device_, nullptr);
}

absl::Status VulkanDevice::Ready() {
  absl::MutexLock lock(&init_mu_);
  if (!initialized_) {
    initialized_ = true;
    init_status_ = Init();
    if (!init_status_.ok()) {
      init_status_ = absl::Status(init_status_.code(),
                                  absl::StrCat(name_, ": setup failed: ", init_status_.message()));
    }
  }
  return init_status_;
}

absl::Status VulkanDevice::Init() {
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo queue{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  queue.queueFamilyIndex = info_.queue_family;
  queue.queueCount = 1;
  queue.pQueuePriorities = &priority;

  VkPhysicalDeviceFeatures2 have{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  VkPhysicalDeviceVulkan11Features have11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  VkPhysicalDeviceVulkan12Features have12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  have.pNext = &have11;
  have11.pNext = &have12;
  vkGetPhysicalDeviceFeatures2(info_.handle, &have);

  VkPhysicalDeviceFeatures2 want{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  VkPhysicalDeviceVulkan11Features want11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  VkPhysicalDeviceVulkan12Features want12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  want.pNext = &want11;
  want11.pNext = &want12;
  want.features.shaderInt64 = VK_TRUE;
  want.features.shaderInt16 = have.features.shaderInt16;
  want.features.shaderFloat64 = have.features.shaderFloat64;
  want11.storageBuffer16BitAccess = VK_TRUE;
  want12.storageBuffer8BitAccess = VK_TRUE;
  want12.bufferDeviceAddress = VK_TRUE;
  want12.timelineSemaphore = VK_TRUE;
  want12.shaderInt8 = have12.shaderInt8;
  want12.shaderFloat16 = have12.shaderFloat16;

  std::vector<const char*> extensions;
  if (info_.memory_budget) extensions.push_back(VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  VkDeviceCreateInfo create{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  create.pNext = &want;
  create.queueCreateInfoCount = 1;
  create.pQueueCreateInfos = &queue;
  create.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
  create.ppEnabledExtensionNames = extensions.data();
  TG_VK_RETURN_IF_ERROR(vkCreateDevice(info_.handle, &create, nullptr, &device_));
  vkGetDeviceQueue(device_, info_.queue_family, 0, &queue_);

  uint32_t device_type = 0, host_type = 0;
  bool mapped = false;
  TG_RETURN_IF_ERROR(ChooseMemoryTypes(&device_type, &mapped, &host_type));
  mapped = mapped && !options_.force_staging;
  device_pool_ = std::make_unique<MemoryPool>(device_, device_type, mapped, info_.max_allocation,
                                              absl::StrCat(name_, " device memory"));
  host_pool_ = std::make_unique<MemoryPool>(device_, host_type, /*map=*/true, info_.max_allocation,
                                            absl::StrCat(name_, " pinned host memory"));
  pipelines_ = std::make_unique<Pipelines>(this);
  TG_RETURN_IF_ERROR(pipelines_->Init());
  transfers_ = std::make_unique<TransferContext>(this);
  return transfers_->Init();
}

absl::Status VulkanDevice::ChooseMemoryTypes(uint32_t* device_type, bool* device_mapped,
                                             uint32_t* host_type) const {
  TG_ASSIGN_OR_RETURN(const uint32_t bits, BufferMemoryTypeBits(const_cast<VulkanDevice*>(this)));
  const VkPhysicalDeviceMemoryProperties& mem = info_.memory;
  int best_device = -1, best_host = -1;
  auto heap_size = [&](int t) { return mem.memoryHeaps[mem.memoryTypes[t].heapIndex].size; };
  for (uint32_t t = 0; t < mem.memoryTypeCount; ++t) {
    if ((bits & (1u << t)) == 0) continue;
    const VkMemoryPropertyFlags f = mem.memoryTypes[t].propertyFlags;
    if (f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) {
      // The largest device-local heap; on it, memory the host cannot see (the small BAR
      // window of a discrete GPU is kept for staging-free uploads by the driver).
      const bool better =
          best_device < 0 || heap_size(t) > heap_size(best_device) ||
          (heap_size(t) == heap_size(best_device) &&
           (mem.memoryTypes[best_device].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) &&
           !(f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT));
      if (better) best_device = static_cast<int>(t);
    }
    if ((f & kHostFlags) == kHostFlags) {
      // Cached host memory makes read-backs fast; prefer it.
      const bool cached = f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
      if (best_host < 0 || (cached && !(mem.memoryTypes[best_host].propertyFlags &
                                        VK_MEMORY_PROPERTY_HOST_CACHED_BIT))) {
        best_host = static_cast<int>(t);
      }
    }
  }
  if (best_device < 0) best_device = best_host;  // no device-local memory: use what there is.
  if (best_device < 0 || best_host < 0) {
    return absl::FailedPreconditionError("no memory type holds storage buffers of both kinds");
  }
  *device_type = static_cast<uint32_t>(best_device);
  *device_mapped = (mem.memoryTypes[best_device].propertyFlags & kHostFlags) == kHostFlags;
  *host_type = static_cast<uint32_t>(best_host);
  return absl::OkStatus();
}

DeviceMemory VulkanDevice::memory() const {
  const VkPhysicalDeviceMemoryProperties& mem = info_.memory;
  DeviceMemory out;
  VkPhysicalDeviceMemoryBudgetPropertiesEXT budget{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
  if (info_.memory_budget) {
    VkPhysicalDeviceMemoryProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2};
    props.pNext = &budget;
    vkGetPhysicalDeviceMemoryProperties2(info_.handle, &props);
  }
  for (uint32_t h = 0; h < mem.memoryHeapCount; ++h) {
    if ((mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) == 0) continue;
    out.total += mem.memoryHeaps[h].size;
    if (info_.memory_budget) {
      out.free += budget.heapBudget[h] > budget.heapUsage[h]
                      ? budget.heapBudget[h] - budget.heapUsage[h]
                      : 0;
    }
  }
  if (!info_.memory_budget) {
    const uint64_t used = device_pool_ ? device_pool_->allocated_bytes() : 0;
    out.free = out.total > used ? out.total - used : 0;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Stream>> VulkanDevice::CreateStream() {
  TG_RETURN_IF_ERROR(Ready());
  TG_ASSIGN_OR_RETURN(std::unique_ptr<VulkanStream> stream, VulkanStream::Create(this));
  return std::unique_ptr<Stream>(std::move(stream));
}

absl::StatusOr<std::unique_ptr<Event>> VulkanDevice::CreateEvent() {
  return std::unique_ptr<Event>(new VulkanEvent());
}

bool VulkanDevice::SupportsOp(const Tensor& node) const { return SupportsNode(info_, node); }

bool VulkanDevice::SupportsBufferType(const BufferType* type) const {
  return type == &device_type_ || type == &host_type_;
}

absl::Status VulkanDevice::QueueSubmit(const VkSubmitInfo& submit, VkFence fence) {
  TG_RETURN_IF_ERROR(CheckLost());
  absl::MutexLock lock(&queue_mu_);
  return Check(vkQueueSubmit(queue_, 1, &submit, fence), "vkQueueSubmit");
}

absl::StatusOr<VkCommandPool> VulkanDevice::CreateCommandPool() {
  VkCommandPoolCreateInfo info{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  info.queueFamilyIndex = info_.queue_family;
  VkCommandPool pool = VK_NULL_HANDLE;
  TG_RETURN_IF_ERROR(
      Check(vkCreateCommandPool(device_, &info, nullptr, &pool), "vkCreateCommandPool"));
  return pool;
}

absl::StatusOr<VkCommandBuffer> VulkanDevice::AllocateCommandBuffer(VkCommandPool pool) {
  VkCommandBufferAllocateInfo alloc{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  alloc.commandPool = pool;
  alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  alloc.commandBufferCount = 1;
  VkCommandBuffer cb = VK_NULL_HANDLE;
  TG_RETURN_IF_ERROR(
      Check(vkAllocateCommandBuffers(device_, &alloc, &cb), "vkAllocateCommandBuffers"));
  return cb;
}

absl::Status VulkanDevice::Check(VkResult result, absl::string_view call) {
  if (result == VK_SUCCESS) return absl::OkStatus();
  if (result == VK_ERROR_DEVICE_LOST) lost_.store(true);
  absl::Status s = VkError(result, call);
  return absl::Status(s.code(), absl::StrCat(name_, ": ", s.message()));
}

absl::Status VulkanDevice::CheckLost() const {
  if (!lost_.load()) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat(name_,
                   ": the device was lost (driver reset or crash); its buffers and "
                   "streams are unusable, restart the process"));
}

void VulkanDevice::AddTimeline(Timeline* t) {
  absl::MutexLock lock(&timelines_mu_);
  timelines_.push_back(t);
}

void VulkanDevice::RemoveTimeline(Timeline* t) {
  absl::MutexLock lock(&timelines_mu_);
  timelines_.erase(std::remove(timelines_.begin(), timelines_.end(), t), timelines_.end());
}

absl::Status VulkanDevice::WaitForStreams() {
  TG_RETURN_IF_ERROR(CheckLost());
  // Held while waiting, so that no stream goes away meanwhile.
  absl::MutexLock lock(&timelines_mu_);
  for (Timeline* t : timelines_) {
    // Completion steps run; their errors stay for the stream's own Synchronize.
    TG_RETURN_IF_ERROR(t->Wait(t->last_submitted(), /*take_error=*/false));
  }
  return absl::OkStatus();
}

}  // namespace tg::vulkan
