#include "backends/register_builtin.h"

#include "backends/cpu/cpu_device.h"
#if defined(TG_HAVE_CUDA)
#include "backends/cuda/cuda_device.h"
#endif

namespace tg {

// GPU families first: device indices (rpc-server -d 0,1, --device 0) then count the GPUs
// from 0, as in ggml, and the CPU comes after them.
absl::Status RegisterBuiltinBackends() {
#if defined(TG_HAVE_CUDA)
  if (absl::Status s = cuda::RegisterCudaFamily(); !s.ok()) return s;
#endif
  return cpu::RegisterCpuFamily();
}

}  // namespace tg
