// Packed f32 GEMM (Goto / BLIS style) for MUL_MAT with many activation rows (prefill):
// C[n][m] = sum_k A[m][k] * B[n][k], with A the weights (F32, F16 or BF16: converted to f32
// while packed, so the micro-kernel is the same for all three) and B the f32 activations.
// Panels of B (shared by the threads) and of A (per thread) are packed into the node's
// scratch, cache-blocked for L1 (a B micro-panel), L2 (an A block) and L3 (a B block), and
// multiplied by a register-blocked micro-kernel (AVX-512 32x12, AVX2 16x6, scalar 8x4).
#ifndef TENSORGRID_BACKENDS_CPU_KERNELS_GEMM_F32_H_
#define TENSORGRID_BACKENDS_CPU_KERNELS_GEMM_F32_H_

#include <cstddef>
#include <cstdint>

#include "backends/cpu/compute_params.h"
#include "core/dtype.h"

namespace tg::cpu {

// The weights: row m at data + m * row_stride bytes, elements contiguous.
struct GemmA {
  DType type;  // F32, F16 or BF16.
  const void* data;
  size_t row_stride;
};

// The f32 activations: element (n, k) at data + n * row_stride + k * elem_stride bytes, so
// any strided or permuted view works without a copy.
struct GemmB {
  const void* data;
  size_t row_stride;
  size_t elem_stride;
};

// The f32 output: element (n, m) at data + n * row_stride bytes + m floats.
struct GemmC {
  float* data;
  size_t row_stride;
};

// True for the weight types GemmF32 packs.
bool GemmSupports(DType type);

// Scratch bytes GemmF32 needs with nth threads (it aligns the pointer itself).
size_t GemmWorkSize(int64_t m, int64_t n, int64_t k, int nth);

// Computes C for m < M, n < N. Called by all p.nth threads with the same arguments; `work`
// is GemmWorkSize bytes shared by them. Every thread makes the same number of p.Sync()
// calls, which depends only on M, N and K.
void GemmF32(const ComputeParams& p, void* work, int64_t m, int64_t n, int64_t k, const GemmA& a,
             const GemmB& b, const GemmC& c);

}  // namespace tg::cpu

#endif  // TENSORGRID_BACKENDS_CPU_KERNELS_GEMM_F32_H_
