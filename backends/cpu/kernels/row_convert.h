// Row conversion between any two DTypes (through f32 when they differ): the shared core of
// GET_ROWS, SET_ROWS, CPY and CONT. Vectorized for F16 (F16C / AVX-512) and BF16.
#ifndef TENSORGRID_BACKENDS_CPU_KERNELS_ROW_CONVERT_H_
#define TENSORGRID_BACKENDS_CPU_KERNELS_ROW_CONVERT_H_

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace tg::cpu {

// Converts n elements of src (type src_type, elements src_stride bytes apart) into dst (type
// dst_type, dst_stride bytes apart). Equal types copy bits (no rounding through f32); f32 ->
// F16/BF16 round to nearest even, -> I32 and quantized types use QuantizeRow, and the other
// direction DequantizeRow. A quantized side must have stride == BlockBytes and n a multiple
// of its block size. src and dst must not overlap (unless equal and same layout).
void ConvertRow(DType src_type, const void* src, size_t src_stride, DType dst_type, void* dst,
                size_t dst_stride, int64_t n);

// Contiguous f16 <-> f32 conversions (bit-exact with HalfToFloat / FloatToHalf).
void HalfRowToFloat(const uint16_t* x, float* y, int64_t n);
void FloatRowToHalf(const float* x, uint16_t* y, int64_t n);

}  // namespace tg::cpu

#endif  // TENSORGRID_BACKENDS_CPU_KERNELS_ROW_CONVERT_H_
