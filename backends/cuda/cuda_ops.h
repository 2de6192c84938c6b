// Runs one graph node on a CUDA stream: turns the node's tensors into TensorViews, picks the
// kernel (or cuBLAS) and queues it. Nothing here waits for the device. Errors name the node
// and the CUDA or cuBLAS call. Used by CudaStream; one thread at a time per context.
#ifndef TENSORGRID_BACKENDS_CUDA_CUDA_OPS_H_
#define TENSORGRID_BACKENDS_CUDA_CUDA_OPS_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "backends/cuda/cublas_loader.h"
#include "backends/cuda/cuda_support.h"
#include "backends/cuda/fusion.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/scratch_pool.h"
#include "backends/cuda/tensor_view.h"
#include "core/ops.h"
#include "core/tensor.h"

namespace tg::cuda {

struct NodeContext {
  cudaStream_t stream = nullptr;
  const CublasApi* blas = nullptr;  // nullptr where cuBLAS could not be loaded.
  cublasHandle_t cublas = nullptr;
  ScratchPool* pool = nullptr;  // the stream's temporaries (a captured graph's own).
  ErrorSink err;                // where GET_ROWS, SET_ROWS, MUL_MAT_ID report bad indices.
  PathOptions paths;            // the GPU and tunables the kernel choices depend on.
};

TensorView ViewOf(const Tensor& t);

// The ROPE kernel's arguments for `p`, YaRN's correction range included.
RopeArgs RopeArgsOf(const RopeParams& p);

// True for nodes whose kernels check indices at run time (they report to ctx.err).
bool ChecksIndices(const Tensor& node);

// Queues `node` (not a view op, at least one element) on ctx.stream.
absl::Status RunNode(NodeContext& ctx, Tensor* node);
// Queues a fused step of fusion.h (its nodes as PlanFusions found them) on ctx.stream.
absl::Status RunFused(NodeContext& ctx, const FusedStep& step);

// MUL_MAT and MUL_MAT_ID (cuda_mul_mat.cc).
absl::Status RunMulMat(NodeContext& ctx, Tensor* node);
absl::Status RunMulMatId(NodeContext& ctx, Tensor* node);
// silu(gate) * up into swiglu, both products in one matrix-vector pass (fusion.h's
// kGateUpSwiglu: quantized weights of one type and shape, decode-sized).
absl::Status RunGateUpSwiglu(NodeContext& ctx, const Tensor& gate, const Tensor& up,
                             Tensor* swiglu);

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_CUDA_OPS_H_
