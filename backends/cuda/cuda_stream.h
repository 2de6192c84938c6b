// CudaStream: a CUDA stream of one device with its cuBLAS handle and scratch pool. Compute
// queues every node and returns without waiting; Synchronize waits and reports the run-time
// index errors of the graphs since the last Synchronize (GET_ROWS, SET_ROWS, MUL_MAT_ID, as
// the CPU reports them: INVALID_ARGUMENT naming the node, the index and the range). Transfers
// to and from device memory are queued on the stream; copies between GPUs are peer copies.
// Used by one thread at a time (core/backend.h).
#ifndef TENSORGRID_BACKENDS_CUDA_CUDA_STREAM_H_
#define TENSORGRID_BACKENDS_CUDA_CUDA_STREAM_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cublas_loader.h"
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/scratch_pool.h"
#include "core/backend.h"

namespace tg::cuda {

class CudaStream : public Stream {
 public:
  static absl::StatusOr<std::unique_ptr<CudaStream>> Create(CudaDevice* device);
  ~CudaStream() override;  // waits for the stream's work, then frees its resources.

  Device* device() const override { return device_; }
  absl::Status SetTensorAsync(Tensor* t, const void* data, size_t offset, size_t size) override;
  absl::Status GetTensorAsync(const Tensor* t, void* data, size_t offset, size_t size) override;
  absl::Status CopyTensorAsync(const Tensor* src, Tensor* dst) override;
  absl::Status Synchronize() override;
  absl::Status Compute(Graph& graph) override;
  absl::Status RecordEvent(Event* event) override;
  absl::Status WaitEvent(Event* event) override;
  StreamStats stats() const override { return stats_; }

  const ScratchPool& pool() const { return *pool_; }

 private:
  explicit CudaStream(CudaDevice* device) : device_(device) {}
  absl::Status Init();
  absl::Status Select() const;  // makes the device current on this thread.
  bool InThisDevice(const Tensor* t) const;
  // The index error a kernel reported since the last check, if any (after a sync).
  absl::Status TakeKernelError();

  CudaDevice* device_;
  cudaStream_t stream_ = nullptr;
  const CublasApi* blas_ = nullptr;  // nullptr: no cuBLAS (see cublas_loader.h).
  cublasHandle_t cublas_ = nullptr;
  std::unique_ptr<DeviceAllocator> allocator_;
  std::unique_ptr<ScratchPool> pool_;
  ErrorRecord* device_error_ = nullptr;  // device memory, zeroed.
  ErrorRecord* host_error_ = nullptr;    // pinned copy, fetched after graphs that check.
  bool error_copy_queued_ = false;
  // Descriptions of the index-checking nodes queued since the last check, by ErrorSink::node.
  std::vector<std::string> checked_nodes_;
  StreamStats stats_;
};

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_CUDA_STREAM_H_
