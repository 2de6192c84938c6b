// The process's Vulkan instance, created on first use and kept for the life of the process
// (devices outlive static destruction, as the registry's do), unless the family finds no
// device to register: then it is released again (Release), so that processes on machines
// without a GPU do not keep a driver loaded for nothing. With TG_VULKAN_VALIDATION=1 it
// enables VK_LAYER_KHRONOS_validation; whenever a validation layer is on (that way or through
// VK_INSTANCE_LAYERS) a debug-utils messenger prints each message on stderr and counts the
// errors, and under TG_VULKAN_VALIDATION=1 a process that saw any exits with status 1.
// Thread-safe.
#ifndef TENSORGRID_BACKENDS_VULKAN_VK_INSTANCE_H_
#define TENSORGRID_BACKENDS_VULKAN_VK_INSTANCE_H_

#include <vulkan/vulkan.h>

#include <atomic>
#include <cstdint>

#include "absl/status/statusor.h"

namespace tg::vulkan {

class Instance {
 public:
  // The instance; UNAVAILABLE (naming the call) when there is no Vulkan driver.
  static absl::StatusOr<Instance*> Get();
  // Destroys the instance if it exists; the next Get makes a new one. No device of the
  // instance may be in use.
  static void Release();

  VkInstance handle() const { return instance_; }
  // True when validation messages are being counted.
  bool validating() const { return messenger_ != VK_NULL_HANDLE; }
  // Validation errors reported so far.
  int64_t validation_errors() const { return errors_.load(); }
  // True under TG_VULKAN_VALIDATION=1: streams report validation errors as failures.
  bool strict_validation() const { return strict_; }

 private:
  Instance() = default;
  absl::Status Init();
  void Destroy();
  static VKAPI_ATTR VkBool32 VKAPI_CALL OnMessage(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                  VkDebugUtilsMessageTypeFlagsEXT types,
                                                  const VkDebugUtilsMessengerCallbackDataEXT* data,
                                                  void* user);

  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  bool strict_ = false;
  std::atomic<int64_t> errors_{0};
};

}  // namespace tg::vulkan

#endif  // TENSORGRID_BACKENDS_VULKAN_VK_INSTANCE_H_
