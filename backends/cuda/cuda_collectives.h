// The CUDA family's Collectives (core/backend.h): all-reduce of one F32 tensor per CUDA device
// of this process, as the meta backend asks for tensor parallelism. The algorithm per tensor
// comes from allreduce_plan.h: the peer-to-peer one-shot and two-shot kernels (allreduce.cu)
// over peer-mapped memory, or on one GPU plain device memory (TG_CUDA_DEVICES slices), or
// ncclAllReduce where NCCL is loaded (nccl_loader.h) and the ranks are distinct GPUs (NCCL
// refuses two ranks on one GPU).
//
// Ordering without host synchronization: each rank's part is queued on its GPU's legacy
// default stream, which runs after all work already queued on the device's blocking streams
// (the compute that produced the tensor: CudaStream's streams are blocking) and before any
// work queued on them afterwards. Ranks wait for each other with events. The peer-to-peer
// path returns once queued; NCCL is waited for with WaitForCollective, so that an NCCL failure
// or hang ends in a status naming the call (after TG_NCCL_TIMEOUT_S, default 60 s) and the
// NCCL communicators are aborted; later calls then fail with FAILED_PRECONDITION. Every rank
// ends with the same bits.
//
// Thread-safety: CudaCollectives is thread-safe; a communicator is used by one thread at a
// time (the meta backend's rank 0).
#ifndef TENSORGRID_BACKENDS_CUDA_CUDA_COLLECTIVES_H_
#define TENSORGRID_BACKENDS_CUDA_CUDA_COLLECTIVES_H_

#include <cuda_runtime_api.h>

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "backends/cuda/allreduce_plan.h"
#include "backends/cuda/nccl_loader.h"
#include "core/backend.h"

namespace tg::cuda {

class CudaDevice;

struct CollectiveOptions {
  AllReduceThresholds thresholds;  // TG_CUDA_AR_* (allreduce_plan.h).
  bool use_nccl = true;            // false: peer-to-peer only.
  // Every tensor takes this algorithm (tests: NCCL with one rank, each P2P kernel).
  std::optional<AllReduceAlgorithm> force;
  int64_t timeout_us = 0;  // NCCL waits; 0: TG_NCCL_TIMEOUT_S or its default.
};

class CudaCommunicator : public Communicator {
 public:
  ~CudaCommunicator() override;
  // Sums tensors[i] (on devices[i] of Init: F32, contiguous, equal sizes) in place.
  absl::Status AllReduce(absl::Span<Tensor* const> tensors) override;

  const AllReduceTopology& topology() const { return topology_; }
  AllReduceChoice last_choice() const { return last_; }

 private:
  friend class CudaCollectives;
  struct Rank {
    CudaDevice* device = nullptr;
    int ordinal = 0;
    void* stage = nullptr;    // this rank's input, on the wire type.
    void* reduced = nullptr;  // two-shot: this rank's reduced chunk.
    size_t stage_bytes = 0;   // of each.
    cudaEvent_t copied = nullptr, reduced_ready = nullptr, done = nullptr;
    NcclComm comm = nullptr;
    cudaStream_t nccl_stream = nullptr;
    cudaEvent_t nccl_in = nullptr, nccl_out = nullptr;
  };

  CudaCommunicator() = default;
  absl::Status Check(absl::Span<Tensor* const> tensors) const;
  absl::Status EnsureStaging(size_t bytes);
  static void FreeStaging(Rank& r);
  absl::Status WaitAll(int rank, cudaEvent_t Rank::*event) const;
  absl::Status OneShot(absl::Span<Tensor* const> tensors, size_t first, size_t count, bool bf16);
  absl::Status TwoShot(absl::Span<Tensor* const> tensors, size_t first, size_t count, bool bf16);
  absl::Status StageInputs(absl::Span<Tensor* const> tensors, size_t first, size_t count,
                           bool bf16);
  absl::Status NcclAllReduce(absl::Span<Tensor* const> tensors, bool bf16);
  absl::Status NcclQueue(absl::Span<Tensor* const> tensors, bool bf16, size_t first, size_t count);
  void AbortNccl();

  std::vector<Rank> ranks_;
  AllReduceTopology topology_;
  CollectiveOptions options_;
  const NcclApi* nccl_ = nullptr;
  absl::Status broken_;  // set once an NCCL collective failed: the communicators are gone.
  AllReduceChoice last_;
};

class CudaCollectives : public Collectives {
 public:
  CudaCollectives();  // options from the environment.
  absl::StatusOr<std::unique_ptr<Communicator>> Init(absl::Span<Device* const> devices) override;
  // Init with explicit options: INVALID_ARGUMENT for devices that are not CUDA devices or are
  // listed twice, or more than kMaxAllReduceRanks; FAILED_PRECONDITION when the GPUs neither
  // reach each other's memory nor have NCCL.
  absl::StatusOr<std::unique_ptr<CudaCommunicator>> InitWith(absl::Span<Device* const> devices,
                                                             const CollectiveOptions& options);

 private:
  CollectiveOptions defaults_;
};

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_CUDA_COLLECTIVES_H_
