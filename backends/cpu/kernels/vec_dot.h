// Dot-product kernels behind MUL_MAT / MUL_MAT_ID on the CPU, in ggml's design: each weight
// type has an activation format (ggml's "vec_dot_type") that the f32 activations are converted
// to once per node, and a tile kernel that computes up to kMaxTileRows x kMaxTileCols dot
// products of weight rows with activation rows (so that each loaded weight byte meets several
// activations and each activation several weight rows).
//
// The SIMD kernels (AVX-512 with VNNI/VBMI, else AVX2/FMA/F16C) are chosen at compile time.
// The portable kernels stay compiled under namespace scalar, so that tests can compare both
// and exercise the fallback on any machine. Activation formats are private to a kernel set:
// only pair a set's from_f32 with the same set's tile.
#ifndef TENSORGRID_BACKENDS_CPU_KERNELS_VEC_DOT_H_
#define TENSORGRID_BACKENDS_CPU_KERNELS_VEC_DOT_H_

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

// ISA levels. The AVX-512 level is that of Ice Lake / Zen 4 (the Q4_0 kernel needs VBMI byte
// permutes and VNNI); CPUs with older AVX-512 use the AVX2 kernels.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) &&      \
    defined(__AVX512VL__) && defined(__AVX512VNNI__) && defined(__AVX512VBMI__) && \
    defined(__FMA__) && defined(__F16C__)
#define TG_CPU_AVX512 1
#endif
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define TG_CPU_AVX2 1
#endif

// GCC 12's AVX-512 headers raise false -W(maybe-)uninitialized reports wherever an intrinsic
// is inlined (GCC PR105593, fixed in 12.3/13); it has to stay in effect for the includer.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12 && defined(__AVX512F__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace tg::cpu {

inline constexpr int kMaxTileRows = 8;
// Up to 8 activation columns per tile: decoding 8 sequences at once meets each weight block
// once (the quantized kernels unpack it once per pass of columns).
inline constexpr int kMaxTileCols = 8;

// Converts one row of k f32 activations into the kernel set's activation format.
using ActFromF32Fn = void (*)(const float* x, void* y, int64_t k);

// c[j][i] = sum over k of a_i . b_j, for i < rows and j < cols <= kMaxTileCols, where
// a_i = a + i * a_stride bytes is a weight row of the kernel's type and b[j] an activation
// row in the kernel's format. k is a multiple of the weight type's block size. Tiles are
// meant to be up to kMaxTileRows rows; more rows are taken in passes of at most that many
// (a matrix-vector product hands over a whole run of rows in one call). The ahead_rows rows
// after them are what the caller expects to hand over next: a kernel that reads rows side by
// side prefetches them (the hardware prefetcher follows one stream, not 16), so that a run of
// rows handed over in pieces streams as fast as in one call. Prefetches do not fault: ahead
// rows need not exist, and 0 prefetches nothing.
using DotTileFn = void (*)(int64_t k, const void* a, size_t a_stride, int rows, int ahead_rows,
                           const void* const* b, int cols, float* const* c);

struct DotKernels {
  ActFromF32Fn from_f32;               // nullptr: activations are plain f32 rows.
  size_t (*act_row_bytes)(int64_t k);  // bytes of one converted row.
  DotTileFn tile;
  // Weight rows per tile when there are few activation rows (decode). 1 keeps each thread
  // on one sequential stream, which DRAM serves best; kernels whose activation rows are
  // too big for L1 share them between more rows instead, and those with one row per vector
  // lane (Q4_0: AVX2's 32 in four vectors, AVX-512's 16) take that many rows, at any number
  // of activation rows, and prefetch the next ones.
  int streaming_rows;
};

// The fastest kernels of this build for weights of `type` (any DType but I32).
const DotKernels& GetDotKernels(DType type);
// "avx512", "avx2" or "scalar": the ISA level GetDotKernels uses.
const char* DotKernelsIsa();

// Test hook: while on, GetDotKernels returns the scalar kernels (process-wide; set it only
// while no kernel runs).
void ForceScalarDotKernelsForTesting(bool on);
bool ScalarDotKernelsForced();

namespace scalar {
// Portable kernels: activations are BlockQ8_0 for the 32-element block types (Q4_0, Q5_0,
// Q5_1, Q8_0, IQ4_NL, MXFP4), BlockQ8_K for the 256-element super-block types (Q2_K..Q6_K,
// IQ4_XS), f32 otherwise (exactly what ggml's reference quantizers produce).
const DotKernels& GetDotKernels(DType type);
}  // namespace scalar

}  // namespace tg::cpu

#endif  // TENSORGRID_BACKENDS_CPU_KERNELS_VEC_DOT_H_
