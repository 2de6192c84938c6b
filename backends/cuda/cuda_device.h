// The CUDA device family: one device per visible NVIDIA GPU, "CUDA0".."CUDA<n-1>", with its
// id from the PCI bus id, its memory from cudaMemGetInfo and its compute capability in the
// description. A binary built with CUDA still starts and serves its other devices where
// there is no driver or no GPU: RegisterCudaFamily then registers nothing and says so once
// on stderr. Thread-safe (every entry point selects its device first: the CUDA runtime's
// current device is per host thread).
#ifndef TENSORGRID_BACKENDS_CUDA_CUDA_DEVICE_H_
#define TENSORGRID_BACKENDS_CUDA_CUDA_DEVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/cuda/cuda_buffer.h"
#include "core/backend.h"
#include "core/registry.h"

namespace tg::cuda {

class CudaDevice : public Device {
 public:
  // index: the CUDA runtime's device ordinal. host_type: the family's pinned host memory.
  static absl::StatusOr<std::unique_ptr<CudaDevice>> Create(int index, BufferType* host_type);

  absl::string_view name() const override { return name_; }
  absl::string_view description() const override { return description_; }
  DeviceType type() const override { return integrated_ ? DeviceType::kIgpu : DeviceType::kGpu; }
  absl::string_view id() const override { return id_; }
  DeviceMemory memory() const override;  // {0, 0} when the device cannot be asked.
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override;
  BufferType* default_buffer_type() override { return &buffer_type_; }
  BufferType* host_buffer_type() override { return host_type_; }
  bool SupportsOp(const Tensor& node) const override;
  bool SupportsBufferType(const BufferType* type) const override { return type == &buffer_type_; }
  bool OffloadOp(const Tensor& node) const override;
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override;

  int index() const { return index_; }
  // Compute capability as major * 10 + minor (e.g. 90 for sm_90).
  int compute_capability() const { return cc_; }
  bool memory_pools() const { return memory_pools_; }  // cudaMallocAsync works here.

 private:
  CudaDevice(int index, BufferType* host_type) : index_(index), host_type_(host_type) {}

  int index_;
  std::string name_, description_, id_;
  bool integrated_ = false;
  bool memory_pools_ = false;
  int cc_ = 0;
  BufferType* host_type_;
  CudaBufferType buffer_type_{this};
};

class CudaFamily : public DeviceFamily {
 public:
  // The family of every visible device that can run this build's kernels; a line per device
  // left out goes to notes. None: UNAVAILABLE, naming the call and the reason.
  static absl::StatusOr<std::unique_ptr<CudaFamily>> Create(std::vector<std::string>* notes);
  absl::string_view name() const override { return "CUDA"; }
  std::vector<Device*> devices() override;

 private:
  CudaFamily() = default;
  CudaHostBufferType host_type_;
  std::vector<std::unique_ptr<CudaDevice>> devices_;
};

// Number of CUDA devices; UNAVAILABLE naming cudaGetDeviceCount's error (no driver, no
// device) otherwise.
absl::StatusOr<int> CudaDeviceCount();

// One line on stderr, "tensorgrid: <line>", unless TG_CUDA_QUIET is set (to anything but 0):
// test suites that check a tool's stderr line by line run on machines without GPUs.
void CudaNotice(const std::string& line);

// Registers the CUDA family with the process registry, once. Without a usable GPU nothing
// is registered, one line on stderr says why, and the result is still OK.
absl::Status RegisterCudaFamily();

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_CUDA_DEVICE_H_
