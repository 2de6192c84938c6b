// Prefill GEMM for the 32-element block types (Q8_0, Q4_0, Q5_0, Q5_1, IQ4_NL, MXFP4), Q4_K and
// IQ4_XS on AVX-512 VNNI and AVX2 (there all but Q4_0, QGemmSupports): weight tiles of 16 rows are
// packed so that each vector lane holds one row, which lets one scale multiply serve a
// whole block.
#ifndef TENSORGRID_BACKENDS_CPU_KERNELS_QGEMM_H_
#define TENSORGRID_BACKENDS_CPU_KERNELS_QGEMM_H_

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace tg::cpu {

// Weight rows per packed tile (one per lane of a 16-lane vector).
inline constexpr int kQGemmRows = 16;
// Activation columns per call of QGemmTile.
inline constexpr int kQGemmCols = 8;

// True when this build has the packed GEMM for weights of `type`.
bool QGemmSupports(DType type);

// Bytes of one activation row of length k in the GEMM's format (Q8_0 blocks with an f32
// scale and the weight type's zero-point correction).
size_t QGemmActRowBytes(int64_t k);
// Converts k f32 activations for weights of `type` (the quants are QuantizeRowQ8_0's).
void QGemmActFromF32(DType type, const float* x, void* y, int64_t k);

// Bytes of one packed tile of kQGemmRows rows of length k.
size_t QGemmPackBytes(int64_t k);
// Packs weight rows a + i * a_stride, i < rows <= kQGemmRows, into `pack` (64-byte aligned);
// missing rows read as zeros.
void QGemmPack(DType type, int64_t k, const char* a, size_t a_stride, int rows, void* pack);

// c[j][i] = packed row i . activation row b[j], for i < rows and j < cols <= kQGemmCols;
// `type` is the packed weights' type.
void QGemmTile(DType type, int64_t k, const void* pack, int rows, const void* const* b, int cols,
               float* const* c);

}  // namespace tg::cpu

#endif  // TENSORGRID_BACKENDS_CPU_KERNELS_QGEMM_H_
