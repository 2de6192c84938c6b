// The CUDA kernels' launchers: plain C++ declarations (the .cu files define them), called by
// cuda_ops.cc on the node's stream. Each returns the launch's cudaError_t (a launch never
// blocks; the kernel's own run-time errors, such as a row index out of range, go to the
// stream's ErrorRecord). Shapes were validated by the graph builder and CudaSupportsOp, so
// launchers assume them. Thread-safety: as the stream they are given.
#ifndef TENSORGRID_BACKENDS_CUDA_KERNELS_H_
#define TENSORGRID_BACKENDS_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/allreduce_math.h"
#include "backends/cuda/quant_math.h"
#include "backends/cuda/rope_math.h"
#include "backends/cuda/tensor_view.h"

namespace tg::cuda {

// Where kernels report a bad index: the first report wins (atomicCAS on code).
enum KernelErrorCode : int { kKernelOk = 0, kBadRowIndex = 1, kBadExpertId = 2 };
struct ErrorRecord {
  int code;       // KernelErrorCode.
  int node;       // index of the node in the graph being computed.
  int64_t value;  // the offending index.
  int64_t limit;  // valid indices are [0, limit).
};
struct ErrorSink {
  ErrorRecord* record = nullptr;  // device memory; nullptr: nothing is reported.
  int node = 0;
};

// cudaSuccess when this build holds kernels the current device can run (an sm_* image of
// its architecture or older, or PTX to compile); cudaErrorNoKernelImageForDevice otherwise.
cudaError_t CheckKernelImage();

enum class BinaryOp { kAdd, kMul };
enum class UnaryOp { kScale, kSilu };

// ADD, MUL: dst = a op b[i % b.ne] (elementwise.cu).
cudaError_t LaunchBinary(BinaryOp op, const TensorView& dst, const TensorView& a,
                         const TensorView& b, cudaStream_t stream);
// SCALE (a * p0 + p1), SILU.
cudaError_t LaunchUnary(UnaryOp op, float p0, float p1, const TensorView& dst, const TensorView& a,
                        cudaStream_t stream);
cudaError_t LaunchSwiglu(const TensorView& dst, const TensorView& gate, const TensorView& up,
                         cudaStream_t stream);
cudaError_t LaunchRmsNorm(const TensorView& dst, const TensorView& a, float eps,
                          cudaStream_t stream);
// RMS_NORM then MUL by w (broadcast as MUL does), fused: dst is the MUL's result.
cudaError_t LaunchRmsNormMul(const TensorView& dst, const TensorView& a, const TensorView& w,
                             float eps, cudaStream_t stream);
// mask: nullptr when absent.
cudaError_t LaunchSoftMax(const TensorView& dst, const TensorView& a, const TensorView* mask,
                          float scale, cudaStream_t stream);
// ff: the frequency factors, nullptr when absent.
cudaError_t LaunchRope(const TensorView& dst, const TensorView& a, const TensorView& pos,
                       const TensorView* ff, const RopeArgs& args, cudaStream_t stream);
// Two ROPEs with the same positions, frequency factors and parameters in one launch (Q, K).
cudaError_t LaunchRopePair(const TensorView& dst0, const TensorView& a0, const TensorView& dst1,
                           const TensorView& a1, const TensorView& pos, const TensorView* ff,
                           const RopeArgs& args, cudaStream_t stream);
cudaError_t LaunchArgmax(const TensorView& dst, const TensorView& a, cudaStream_t stream);

// CPY/CONT (convert.cu): element k of src to element k of dst, converted; a quantized side
// maps rows in order. Any plain -> plain, quantized -> plain (F32, F16, BF16), plain ->
// Q8_0/Q4_0 and same-type copies.
cudaError_t LaunchCopy(const TensorView& dst, const TensorView& src, cudaStream_t stream);
cudaError_t LaunchGetRows(const TensorView& dst, const TensorView& a, const TensorView& idx,
                          ErrorSink err, cudaStream_t stream);
// dst: the destination rows (SET_ROWS's src0 and result); b: the F32 rows.
cudaError_t LaunchSetRows(const TensorView& dst, const TensorView& b, const TensorView& idx,
                          ErrorSink err, cudaStream_t stream);
// The rows of F32 src (k = src.ne[0] each, in row order) as Q8_1 blocks for weights of
// weight_type: NumRows(src) * k / 32 blocks at out (QuantizeActRow is the host reference).
cudaError_t LaunchQuantizeAct(int weight_type, const TensorView& src, BlockQ8_1* out,
                              cudaStream_t stream);

// The matrix-vector kernel (matvec.cu): up to kMatVecMaxCols activation columns per pass
// over a weight row, or, for MUL_MAT_ID, one column per (slot, token) with its expert.
// Quantized rows are staged in shared memory with 16-byte loads (launch_geometry.h's
// MatVecPlan); float rows are read in 16-byte vectors where aligned.
inline constexpr int kMatVecMaxCols = 8;
struct MatVecArgs {
  int weight_type = 0;
  const char* w = nullptr;  // weight rows (k elements each, contiguous).
  // Gate/up fused (quantized weights, MUL_MAT only): the up projection's rows, with w's
  // strides; the result is silu(w . x) * (w_up . x).
  const char* w_up = nullptr;
  int64_t w_nb1 = 0, w_nb2 = 0, w_nb3 = 0;
  int64_t k = 0, m = 0;       // row length, rows.
  const char* act = nullptr;  // converted activations: F32 rows or Q8_1 blocks.
  int64_t act_col_bytes = 0;  // bytes per activation column.
  float* dst = nullptr;       // column c at dst + c * m.
  int64_t n_batch = 0;        // MUL_MAT: b2 * b3; MUL_MAT_ID: n_used * n_tokens.
  // MUL_MAT: columns col0 .. col0 + n_cols - 1 (n_cols <= kMatVecMaxCols) of the
  // cols_per_batch columns of each batch; batch (j2, j3) uses weight matrix (j2 / r2, j3 / r3).
  int n_cols = 1;
  int64_t cols_per_batch = 1, col0 = 0;
  int64_t b2 = 1, r2 = 1, r3 = 1;
  // MUL_MAT_ID (ids != nullptr): batch (i, t) uses expert ids[i, t] on activation column
  // (i % act_per_token) + act_per_token * t. With an expert range (expert parallelism: this
  // device holds experts [expert_first, expert_first + n_expert)), an id outside it belongs
  // to another device and gives a zero column; without one it is an error.
  const char* ids = nullptr;
  int64_t ids_nb0 = 0, ids_nb1 = 0;
  int64_t n_used = 1, n_expert = 1, act_per_token = 1;
  int64_t expert_first = 0;
  bool expert_range = false;
  ErrorSink err;
};
cudaError_t LaunchMatVec(const MatVecArgs& args, cudaStream_t stream);

// MUL_MAT of quantized weights (every quantized type) with many activation columns: the
// int8 tile kernel (mmq.cu, mmq_tile.h) on the matrix-vector kernel's Q8_1 activations.
struct MmqArgs {
  int weight_type = 0;
  const char* w = nullptr;
  int64_t w_nb1 = 0, w_nb2 = 0, w_nb3 = 0;
  int64_t k = 0, m = 0;
  const char* act = nullptr;  // Q8_1 blocks, one column per row of b (dim 1 fastest).
  int64_t act_col_bytes = 0;
  int64_t n = 0;  // columns per (j2, j3) batch.
  float* dst = nullptr;
  int64_t dst_nb1 = 0, dst_nb2 = 0, dst_nb3 = 0;  // bytes.
  int64_t b2 = 1, b3 = 1, r2 = 1, r3 = 1;         // batches and weight broadcast.
};
// False when the grid cannot address the product (more than 65535 batches or column tiles).
bool MmqFits(const MmqArgs& args);
cudaError_t LaunchMmq(const MmqArgs& args, cudaStream_t stream);

// FLASH_ATTN (flash_attn.cu); mask nullptr when absent.
inline constexpr int kFlashAttnMaxHead = 512;  // D and Dv: q in shared memory, 4 outputs/thread.
cudaError_t LaunchFlashAttn(const TensorView& dst, const TensorView& q, const TensorView& k,
                            const TensorView& v, const TensorView* mask, float scale,
                            cudaStream_t stream);
// FLASH_ATTN on tensor cores (flash_attn_mma.cu): F16 K and V, head size 64 or 128 (D == Dv),
// 64 queries per block; K/V rows 4-byte aligned. FlashAttnMmaFits says when it applies.
bool FlashAttnMmaFits(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& dst);
cudaError_t LaunchFlashAttnMma(const TensorView& dst, const TensorView& q, const TensorView& k,
                               const TensorView& v, const TensorView* mask, float scale,
                               cudaStream_t stream);

// The peer-to-peer all-reduce's kernels (allreduce.cu, allreduce_math.h): elements
// [begin, end) of dst = the sum over ranks of srcs (in rank order), each side F32 or BF16;
// the sources may be other GPUs' memory (peer access) or other slices of this GPU.
struct WireSources {
  const void* p[kMaxAllReduceRanks] = {};
  int n = 0;
};
cudaError_t LaunchReduceRanks(const WireSources& srcs, bool src_bf16, void* dst, bool dst_bf16,
                              size_t begin, size_t end, cudaStream_t stream);
// Elements [begin, end) of src into dst, converted between F32 and BF16 as the flags say.
cudaError_t LaunchWireCopy(const void* src, bool src_bf16, void* dst, bool dst_bf16, size_t begin,
                           size_t end, cudaStream_t stream);

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_KERNELS_H_
