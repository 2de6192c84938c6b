// CudaStream: a CUDA stream of one device with its cuBLAS handle and scratch pool. Compute
// queues every node and returns without waiting; Synchronize waits and reports the run-time
// index errors of the graphs since the last Synchronize (GET_ROWS, SET_ROWS, MUL_MAT_ID, as
// the CPU reports them: INVALID_ARGUMENT naming the node, the index and the range). Transfers
// to and from device memory are queued on the stream; copies between GPUs are peer copies.
//
// Compute fuses what fusion.h allows and, for decode-sized graphs run again unchanged,
// captures the graph's kernels as a CUDA graph and replays it (graph_capture.h says when): a
// capture owns its scratch and its own error record, so a replay needs no host work but one
// launch. TG_CUDA_GRAPHS=0 and TG_CUDA_FUSION=0 turn either off (cuda_tuning.h).
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
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/graph_capture.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/scratch_pool.h"
#include "core/backend.h"

namespace tg::cuda {

class CudaCapture;

class CudaStream : public Stream {
 public:
  static absl::StatusOr<std::unique_ptr<CudaStream>> Create(CudaDevice* device);
  ~CudaStream() override;  // waits for the stream's work, then frees its resources.

  Device* device() const override { return device_; }
  absl::Status SetTensorAsync(Tensor* t, const void* data, size_t offset, size_t size) override;
  absl::Status GetTensorAsync(const Tensor* t, void* data, size_t offset, size_t size) override;
  // cudaMemcpy2DAsync on this stream (copy_2d_plan.h); other memory: the buffer's 2D call.
  absl::Status SetTensor2DAsync(Tensor* t, const void* data, const StridedRange& r) override;
  absl::Status GetTensor2DAsync(const Tensor* t, void* data, const StridedRange& r) override;
  absl::Status CopyTensorAsync(const Tensor* src, Tensor* dst) override;
  absl::Status Synchronize() override;
  absl::Status Compute(Graph& graph) override;
  absl::Status RecordEvent(Event* event) override;
  absl::Status WaitEvent(Event* event) override;
  StreamStats stats() const override { return stats_; }

  const ScratchPool& pool() const { return *pool_; }
  // What the CUDA graph captures did so far (tests, tg-bench diagnostics).
  const GraphCaptureCache::Stats& capture_stats() const { return captures_.stats(); }

 private:
  friend class CudaCapture;

  explicit CudaStream(CudaDevice* device);
  absl::Status Init();
  absl::Status Select() const;  // makes the device current on this thread.
  bool InThisDevice(const Tensor* t) const;
  NodeContext BaseContext(ScratchPool* pool) const;
  // Queues the graph's kernels (fused where the plan says) with errors reported to `record`
  // under the names appended to *names. Stops at the first failing node.
  absl::Status QueueNodes(Graph& graph, ScratchPool* pool, ErrorRecord* record,
                          std::vector<std::string>* names, bool* checks);
  absl::Status RunEager(Graph& graph);
  // Captures the graph into a CUDA graph and launches it; nullptr when CUDA refused (then
  // nothing of the graph ran).
  std::unique_ptr<CudaCapture> CaptureAndLaunch(Graph& graph);
  absl::Status Replay(CudaCapture* capture);
  // The index error a kernel reported since the last check, if any (after a sync).
  absl::Status TakeKernelError();
  absl::Status TakeCaptureError(CudaCapture* capture);
  void CaptureDropped(CudaCapture* capture);  // from ~CudaCapture.

  CudaDevice* device_;
  cudaStream_t stream_ = nullptr;
  const CublasApi* blas_ = nullptr;  // nullptr: no cuBLAS (see cublas_loader.h).
  cublasHandle_t cublas_ = nullptr;
  PathOptions paths_;
  std::unique_ptr<DeviceAllocator> allocator_;
  std::unique_ptr<ScratchPool> pool_;
  ErrorRecord* device_error_ = nullptr;  // device memory, zeroed.
  ErrorRecord* host_error_ = nullptr;    // pinned copy, fetched after graphs that check.
  bool error_copy_queued_ = false;
  // Descriptions of the index-checking nodes queued since the last check, by ErrorSink::node.
  std::vector<std::string> checked_nodes_;
  GraphCaptureCache captures_;
  std::vector<CudaCapture*> replayed_checks_;  // replays with index checks since the last sync.
  absl::Status dropped_error_;  // an index error of a capture dropped before its sync.
  StreamStats stats_;
};

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_CUDA_STREAM_H_
