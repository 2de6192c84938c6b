// Turning VkResult into absl::Status: every Vulkan call of the backend goes through
// TG_VK_RETURN_IF_ERROR, so a failure comes back as a status naming the call, never an abort.
#ifndef TENSORGRID_BACKENDS_VULKAN_VK_CHECK_H_
#define TENSORGRID_BACKENDS_VULKAN_VK_CHECK_H_

#include <vulkan/vulkan.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tg::vulkan {

// "VK_ERROR_DEVICE_LOST" for a result code.
absl::string_view VkResultName(VkResult result);

// The status of a failed call `call` (its source text): RESOURCE_EXHAUSTED for the
// out-of-memory codes, UNAVAILABLE for a lost device, INTERNAL otherwise.
absl::Status VkError(VkResult result, absl::string_view call);

}  // namespace tg::vulkan

// Returns VkError(result, "vkFoo") from the enclosing function when `expr` is not VK_SUCCESS.
#define TG_VK_RETURN_IF_ERROR(expr)                                     \
  do {                                                                  \
    if (const VkResult _vk_result = (expr); _vk_result != VK_SUCCESS) { \
      return ::tg::vulkan::VkError(_vk_result, #expr);                  \
    }                                                                   \
  } while (0)

#endif  // TENSORGRID_BACKENDS_VULKAN_VK_CHECK_H_
