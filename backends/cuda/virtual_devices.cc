#include "backends/cuda/virtual_devices.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tg::cuda {

absl::StatusOr<int> ParseCudaDevices(const char* value) {
  if (value == nullptr || *value == '\0') return 1;
  int n = 0;
  if (!absl::SimpleAtoi(value, &n) || n < 1 || n > kMaxCudaVirtualDevices) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TG_CUDA_DEVICES='", value, "' must be a number from 1 to ", kMaxCudaVirtualDevices));
  }
  return n;
}

absl::StatusOr<CudaDevicePlan> PlanCudaDevices(const GpuQuery& query, int n_split) {
  if (n_split < 1 || n_split > kMaxCudaVirtualDevices) {
    return absl::InvalidArgumentError(absl::StrCat("cannot split a GPU into ", n_split,
                                                   " devices (1 to ", kMaxCudaVirtualDevices, ")"));
  }
  absl::StatusOr<int> count = query.Count();
  if (!count.ok()) return count.status();
  if (*count == 0) return absl::UnavailableError("cudaGetDeviceCount: no CUDA devices");
  CudaDevicePlan plan;
  for (int ordinal = 0; ordinal < *count; ++ordinal) {
    absl::StatusOr<PhysicalGpu> gpu = query.Describe(ordinal);
    if (!gpu.ok()) {
      plan.notes.push_back(
          absl::StrCat("CUDA device ", ordinal, " skipped: ", gpu.status().message()));
      continue;
    }
    for (int slice = 0; slice < n_split; ++slice) {
      VirtualGpu v;
      v.name = absl::StrCat("CUDA", plan.devices.size());
      v.id = n_split == 1 ? gpu->pci_id : absl::StrCat(gpu->pci_id, "/v", slice);
      v.gpu = *gpu;
      v.slice = slice;
      v.n_slices = n_split;
      v.memory_share = gpu->total_memory / static_cast<size_t>(n_split);
      plan.devices.push_back(std::move(v));
    }
  }
  if (plan.devices.empty()) {
    return absl::UnavailableError(
        absl::StrCat("none of the ", *count, " CUDA devices can be used"));
  }
  return plan;
}

bool MemoryShare::TryReserve(size_t bytes) {
  size_t used = used_.load(std::memory_order_relaxed);
  do {
    if (bytes > limit_ || used > limit_ - bytes) return false;
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  return true;
}

void MemoryShare::Release(size_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }

DeviceMemory MemoryShare::Report(const DeviceMemory& gpu) const {
  const size_t left = limit_ - std::min(limit_, used());
  return {std::min(left, gpu.free), std::min(limit_, gpu.total)};
}

}  // namespace tg::cuda
