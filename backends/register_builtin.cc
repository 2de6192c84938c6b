#include "backends/register_builtin.h"

#include "backends/cpu/cpu_device.h"
#include "core/status_macros.h"
#if defined(TG_HAVE_CUDA)
#include "backends/cuda/cuda_device.h"
#endif
#if defined(TG_HAVE_VULKAN)
#include "backends/vulkan/vk_family.h"
#endif

namespace tg {

// GPU families first: device indices (rpc-server -d 0,1, --device 0) then count the GPUs
// from 0, as in ggml, and the CPU comes after them. CUDA before Vulkan, so that a GPU both
// expose is used through CUDA (the registry hides the later family's duplicate id).
absl::Status RegisterBuiltinBackends(bool verbose) {
#if defined(TG_HAVE_CUDA)
  TG_RETURN_IF_ERROR(cuda::RegisterCudaFamily(verbose));
#endif
#if defined(TG_HAVE_VULKAN)
  TG_RETURN_IF_ERROR(vulkan::RegisterVulkanFamily());
#endif
  return cpu::RegisterCpuFamily();
}

}  // namespace tg
