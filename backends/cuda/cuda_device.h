// The CUDA device family: one device per visible NVIDIA GPU, "CUDA0".."CUDA<n-1>", with its
// id from the PCI bus id, its memory from cudaMemGetInfo and its compute capability in the
// description; with TG_CUDA_DEVICES=N, N devices per GPU (virtual_devices.h), each with a
// 1/N share of the memory and its own memory pool. A binary built with CUDA still starts and
// serves its other devices where there is no driver or no GPU: RegisterCudaFamily then
// registers nothing and says why once on stderr (silent where no NVIDIA driver is installed). Thread-safe (every entry point selects its
// device first: the CUDA runtime's current device is per host thread).
#ifndef TENSORGRID_BACKENDS_CUDA_CUDA_DEVICE_H_
#define TENSORGRID_BACKENDS_CUDA_CUDA_DEVICE_H_

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/cuda/cuda_buffer.h"
#include "backends/cuda/virtual_devices.h"
#include "core/backend.h"
#include "core/registry.h"

namespace tg::cuda {

class CudaCollectives;

class CudaDevice : public Device {
 public:
  // host_type: the family's pinned host memory; collectives: the family's (may be nullptr).
  static absl::StatusOr<std::unique_ptr<CudaDevice>> Create(const VirtualGpu& gpu,
                                                            BufferType* host_type,
                                                            Collectives* collectives);
  ~CudaDevice() override;

  absl::string_view name() const override { return name_; }
  absl::string_view description() const override { return description_; }
  DeviceType type() const override { return integrated_ ? DeviceType::kIgpu : DeviceType::kGpu; }
  absl::string_view id() const override { return id_; }
  // {0, 0} when the device cannot be asked; a slice of a split GPU reports its share.
  DeviceMemory memory() const override;
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override;
  BufferType* default_buffer_type() override { return &buffer_type_; }
  BufferType* host_buffer_type() override { return host_type_; }
  bool SupportsOp(const Tensor& node) const override;
  bool SupportsBufferType(const BufferType* type) const override { return type == &buffer_type_; }
  bool OffloadOp(const Tensor& node) const override;
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override;
  Collectives* collectives() override { return collectives_; }

  // The CUDA runtime's device ordinal (shared by the slices of a split GPU).
  int index() const { return gpu_.gpu.ordinal; }
  const VirtualGpu& gpu() const { return gpu_; }
  // Compute capability as major * 10 + minor (e.g. 90 for sm_90).
  int compute_capability() const { return gpu_.gpu.cc; }
  bool memory_pools() const { return memory_pools_; }  // cudaMallocAsync works here.
  // This slice's own stream-ordered pool (nullptr: the GPU's default pool).
  cudaMemPool_t memory_pool() const { return pool_; }
  // What this device may allocate: the whole GPU, or its slice's share.
  MemoryShare& share() { return share_; }

 private:
  CudaDevice(const VirtualGpu& gpu, BufferType* host_type, Collectives* collectives);

  VirtualGpu gpu_;
  std::string name_, description_, id_;
  bool integrated_ = false;
  bool memory_pools_ = false;
  cudaMemPool_t pool_ = nullptr;
  BufferType* host_type_;
  Collectives* collectives_;
  MemoryShare share_;
  CudaBufferType buffer_type_{this};
};

class CudaFamily : public DeviceFamily {
 public:
  // The devices of every visible GPU that can run this build's kernels, each split into
  // TG_CUDA_DEVICES; a line per GPU left out goes to notes. None: UNAVAILABLE, naming the call
  // and the reason. A bad TG_CUDA_DEVICES: INVALID_ARGUMENT.
  static absl::StatusOr<std::unique_ptr<CudaFamily>> Create(std::vector<std::string>* notes);
  ~CudaFamily() override;
  absl::string_view name() const override { return "CUDA"; }
  std::vector<Device*> devices() override;

 private:
  CudaFamily();
  CudaHostBufferType host_type_;
  std::unique_ptr<CudaCollectives> collectives_;
  std::vector<std::unique_ptr<CudaDevice>> devices_;
};

// The CUDA runtime as a GpuQuery: the count, and per GPU its facts or why it is unusable
// (no kernels in this build for its architecture).
class CudaGpuQuery : public GpuQuery {
 public:
  absl::StatusOr<int> Count() const override;
  absl::StatusOr<PhysicalGpu> Describe(int ordinal) const override;
};

// Number of CUDA devices; UNAVAILABLE naming cudaGetDeviceCount's error (no driver, no
// device) otherwise.
absl::StatusOr<int> CudaDeviceCount();

// One line on stderr, "tensorgrid: <line>", unless TG_CUDA_QUIET is set (to anything but 0):
// test suites that check a tool's stderr line by line run on machines without GPUs.
void CudaNotice(const std::string& line);

// Why CUDA cannot be used, as one line for the user, or "" when nothing needs saying. A host
// with no NVIDIA driver at all (no libcuda.so.1) is the normal CPU host: silent unless
// `verbose`. A driver older than the runtime this build carries names both versions (CUDA's
// encoding: 12040 is 12.4; 0 when unknown); anything else gives the runtime's error.
std::string CudaUnavailableLine(const absl::Status& why, bool driver_installed,
                                int driver_version, int runtime_version, bool verbose);

// Registers the CUDA family with the process registry, once (the first call's `verbose`
// counts). Without a usable GPU nothing is registered, CudaUnavailableLine says why (on
// stderr, when it says anything), and the result is still OK.
absl::Status RegisterCudaFamily(bool verbose = false);

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_CUDA_DEVICE_H_
