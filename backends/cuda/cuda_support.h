// What the CUDA kernels can compute, decided on the graph node alone (plain C++, unit-tested
// without a GPU): CudaDevice::SupportsOp answers with CudaSupportsOp, so the scheduler gives
// anything else to another device. Also the choice between the matrix-vector kernel and a
// cuBLAS GEMM for MUL_MAT. Pure; thread-safe.
#ifndef TENSORGRID_BACKENDS_CUDA_CUDA_SUPPORT_H_
#define TENSORGRID_BACKENDS_CUDA_CUDA_SUPPORT_H_

#include <cstdint>

#include "backends/cuda/cuda_tuning.h"
#include "core/tensor.h"

namespace tg::cuda {

// Up to this many activation columns, MUL_MAT runs the matrix-vector kernel (weights read
// once for all columns, as ggml's MMVQ); beyond, a cuBLAS GEMM.
inline constexpr int64_t kMatVecMaxColumns = 8;
// From this many tokens on, a matrix product whose weights live in host memory is worth
// copying them to the GPU for (ggml's offload threshold).
inline constexpr int64_t kOffloadMinBatch = 32;

// The oldest GPUs with the warp-level int8 and f16 mma instructions the tile kernels use
// (Turing, sm_75).
inline constexpr int kMinTensorCoreCc = 75;

enum class MulMatPath {
  kMatVec,   // matvec.cu: Q8_1 activations for quantized weights, f32 for float weights.
  kMmq,      // mmq.cu: int8 tensor-core tiles on Q8_1 activations (every quantized type).
  kGemmF32,  // cuBLAS SGEMM: F32 weights (in place) and BF16 weights (widened to F32).
  kGemmF16,  // cuBLAS GEMM on tensor cores: F16 weights, quantized ones dequantized to F16,
             // activations rounded to F16, f32 accumulation.
};

// What the path choices depend on besides the node: the GPU and the tunables.
struct PathOptions {
  int cc = 0;  // compute capability, major * 10 + minor.
  CudaTuning tuning;
};

// Decode-sized products take the matrix-vector kernel; quantized weights with up to
// tuning.mmq_max_batch columns the int8 tiles (on GPUs with tensor cores); the rest cuBLAS.
MulMatPath ChooseMulMatPath(const Tensor& mul_mat, const PathOptions& options);
// FLASH_ATTN on the tensor-core kernel: F16 K and V of head size 64 or 128 (= Dv), at least
// tuning.fa_mma_min_queries queries, a GPU with tensor cores (the launcher also checks the
// alignment of the K/V rows).
bool UseFlashAttnMma(const Tensor& flash_attn, const PathOptions& options);
// Products and attention over more than `max_tokens` tokens are prompt-sized: a graph holding
// one is not captured as a CUDA graph (cuda_tuning.h's kDefaultGraphMaxTokens says why).
bool PromptSized(const Tensor& node, int64_t max_tokens);
// False when a GEMM path's sizes do not fit cuBLAS's int arguments (the matrix-vector kernel,
// in passes of kMatVecMaxColumns columns, then does the product; so it does without cuBLAS).
bool GemmFitsCublas(const Tensor& mul_mat);

// True when every stride and the view offset of t are multiples of what the kernels load at
// once (4 bytes for F32/I32, 2 for F16/BF16 and the quantized rows; a quantized type's nb[0],
// its block size, does not count): a graph from the network may hold views that are not, and
// a misaligned load would kill the CUDA context.
bool KernelAligned(const Tensor& t);

bool CudaSupportsOp(const Tensor& node);

// Device::OffloadOp for CUDA devices: matrix products of at least kOffloadMinBatch tokens.
bool CudaOffloadOp(const Tensor& node);

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_CUDA_SUPPORT_H_
