// Runs one graph node on a CUDA stream: turns the node's tensors into TensorViews, picks the
// kernel (or cuBLAS) and queues it. Nothing here waits for the device. Errors name the node
// and the CUDA or cuBLAS call. Used by CudaStream; one thread at a time per context.
#ifndef TENSORGRID_BACKENDS_CUDA_CUDA_OPS_H_
#define TENSORGRID_BACKENDS_CUDA_CUDA_OPS_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "backends/cuda/cublas_loader.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/scratch_pool.h"
#include "backends/cuda/tensor_view.h"
#include "core/tensor.h"

namespace tg::cuda {

struct NodeContext {
  cudaStream_t stream = nullptr;
  const CublasApi* blas = nullptr;  // nullptr where cuBLAS could not be loaded.
  cublasHandle_t cublas = nullptr;
  ScratchPool* pool = nullptr;  // the stream's temporaries.
  ErrorSink err;                // where GET_ROWS, SET_ROWS, MUL_MAT_ID report bad indices.
};

TensorView ViewOf(const Tensor& t);

// True for nodes whose kernels check indices at run time (they report to ctx.err).
bool ChecksIndices(const Tensor& node);

// Queues `node` (not a view op, at least one element) on ctx.stream.
absl::Status RunNode(NodeContext& ctx, Tensor* node);

// MUL_MAT and MUL_MAT_ID (cuda_mul_mat.cc).
absl::Status RunMulMat(NodeContext& ctx, Tensor* node);
absl::Status RunMulMatId(NodeContext& ctx, Tensor* node);

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_CUDA_OPS_H_
