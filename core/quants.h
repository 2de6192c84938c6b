// Row conversions between f32 and every DType: the reference quantizers (bit-exact with
// ggml's quantize_row_*_ref) and dequantizers. Pure functions, thread-safe.
#ifndef TENSORGRID_CORE_QUANTS_H_
#define TENSORGRID_CORE_QUANTS_H_

#include <cstdint>

#include "core/dtype.h"
#include "core/quant_blocks.h"

namespace tg {

// Converts n f32 values to `type` (n must be a multiple of BlockSize(type)). I32 rounds
// to nearest. Quantized types use the reference (non-imatrix) quantizer.
void QuantizeRow(DType type, const float* src, void* dst, int64_t n);
// Converts n values of `type` to f32 (n must be a multiple of BlockSize(type)).
void DequantizeRow(DType type, const void* src, float* dst, int64_t n);

// Per-type reference routines (n a multiple of the block size).
void QuantizeRowQ4_0(const float* x, BlockQ4_0* y, int64_t n);
void QuantizeRowQ8_0(const float* x, BlockQ8_0* y, int64_t n);
void QuantizeRowQ4_K(const float* x, BlockQ4_K* y, int64_t n);
void QuantizeRowQ6_K(const float* x, BlockQ6_K* y, int64_t n);
void QuantizeRowQ8_K(const float* x, BlockQ8_K* y, int64_t n);
void DequantizeRowQ4_0(const BlockQ4_0* x, float* y, int64_t n);
void DequantizeRowQ8_0(const BlockQ8_0* x, float* y, int64_t n);
void DequantizeRowQ4_K(const BlockQ4_K* x, float* y, int64_t n);
void DequantizeRowQ6_K(const BlockQ6_K* x, float* y, int64_t n);
void DequantizeRowQ8_K(const BlockQ8_K* x, float* y, int64_t n);

}  // namespace tg

#endif  // TENSORGRID_CORE_QUANTS_H_
