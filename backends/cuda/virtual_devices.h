// TG_CUDA_DEVICES=N: every physical GPU becomes N CUDA devices (as TG_CPU_DEVICES does for
// the CPU), so that tensor parallelism is tested on a machine with one GPU. Each virtual
// device has its own streams, its own stream-ordered memory pool and a 1/N share of the
// GPU's memory (allocations beyond the share are RESOURCE_EXHAUSTED, as on a GPU of that
// size). Devices on one GPU reach each other's memory directly (one address space), so the
// collectives use the peer-to-peer all-reduce there (NCCL refuses two ranks on one GPU).
//
// The planning is plain C++ over a GpuQuery (the CUDA runtime in cuda_device.cc, a fake in
// the unit tests): which GPUs are usable, the names CUDA0..CUDA<G*N-1> in GPU order, the ids
// (the PCI id, with "/v<slice>" when split) and the memory shares. MemoryShare is
// thread-safe; the rest is pure.
#ifndef TENSORGRID_BACKENDS_CUDA_VIRTUAL_DEVICES_H_
#define TENSORGRID_BACKENDS_CUDA_VIRTUAL_DEVICES_H_

#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/backend.h"

namespace tg::cuda {

// Upper bound on TG_CUDA_DEVICES: more slices only make each too small to hold a model.
inline constexpr int kMaxCudaVirtualDevices = 16;

struct PhysicalGpu {
  int ordinal = 0;     // the CUDA runtime's device ordinal.
  std::string name;    // e.g. "NVIDIA H100 80GB HBM3".
  std::string pci_id;  // "pci:dddd:bb:dd.f".
  int cc = 0;          // compute capability, major * 10 + minor.
  bool integrated = false;
  size_t total_memory = 0;
};

// The device query behind PlanCudaDevices.
class GpuQuery {
 public:
  virtual ~GpuQuery() = default;
  // UNAVAILABLE naming the call when there is no driver or device.
  virtual absl::StatusOr<int> Count() const = 0;
  // A GPU this build can use, or why not (e.g. FAILED_PRECONDITION: no kernels for it).
  virtual absl::StatusOr<PhysicalGpu> Describe(int ordinal) const = 0;
};

struct VirtualGpu {
  std::string name;  // "CUDA<k>".
  std::string id;    // the GPU's PCI id, "/v<slice>" appended when the GPU is split.
  PhysicalGpu gpu;
  int slice = 0;
  int n_slices = 1;
  size_t memory_share = 0;  // bytes this device may allocate (the whole GPU when not split).
};

struct CudaDevicePlan {
  std::vector<VirtualGpu> devices;
  std::vector<std::string> notes;  // one line per GPU left out, saying why.
};

// TG_CUDA_DEVICES's value (nullptr or empty: 1); INVALID_ARGUMENT naming the value and the
// range otherwise.
absl::StatusOr<int> ParseCudaDevices(const char* value);

// The devices to register: every usable GPU split into n_split. UNAVAILABLE when the query
// fails or no GPU is usable (the notes say why each was left out).
absl::StatusOr<CudaDevicePlan> PlanCudaDevices(const GpuQuery& query, int n_split);

// A virtual device's share of its GPU's memory: allocations reserve from it first.
class MemoryShare {
 public:
  explicit MemoryShare(size_t limit) : limit_(limit) {}
  // False (nothing reserved) when `bytes` more would exceed the share.
  bool TryReserve(size_t bytes);
  void Release(size_t bytes);
  size_t used() const { return used_.load(std::memory_order_relaxed); }
  size_t limit() const { return limit_; }
  // What the device reports: the share as its total, and as free memory what is left of the
  // share, or what the GPU has left if that is less (the other slices use it too).
  DeviceMemory Report(const DeviceMemory& gpu) const;

 private:
  const size_t limit_;
  std::atomic<size_t> used_{0};
};

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_VIRTUAL_DEVICES_H_
