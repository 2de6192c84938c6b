// Row conversions between f32 and every DType: the reference quantizers (bit-exact with
// ggml's quantize_row_*_ref) and dequantizers. Pure functions, thread-safe.
#ifndef TENSORGRID_CORE_QUANTS_H_
#define TENSORGRID_CORE_QUANTS_H_

#include <cstdint>
#include <cstring>

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
void QuantizeRowQ5_0(const float* x, BlockQ5_0* y, int64_t n);
void QuantizeRowQ5_1(const float* x, BlockQ5_1* y, int64_t n);
void QuantizeRowQ2_K(const float* x, BlockQ2_K* y, int64_t n);
void QuantizeRowQ3_K(const float* x, BlockQ3_K* y, int64_t n);
void QuantizeRowQ5_K(const float* x, BlockQ5_K* y, int64_t n);
// IQ4_NL as quantize_row_iq4_nl_ref: no scale search (llama-quantize's quantize_iq4_nl
// searches; both read the same). IQ4_XS as quantize_row_iq4_xs_ref, which searches.
void QuantizeRowIQ4_NL(const float* x, BlockIQ4_NL* y, int64_t n);
void QuantizeRowIQ4_XS(const float* x, BlockIQ4_XS* y, int64_t n);
void QuantizeRowMXFP4(const float* x, BlockMXFP4* y, int64_t n);
void DequantizeRowQ4_0(const BlockQ4_0* x, float* y, int64_t n);
void DequantizeRowQ8_0(const BlockQ8_0* x, float* y, int64_t n);
void DequantizeRowQ4_K(const BlockQ4_K* x, float* y, int64_t n);
void DequantizeRowQ6_K(const BlockQ6_K* x, float* y, int64_t n);
void DequantizeRowQ8_K(const BlockQ8_K* x, float* y, int64_t n);
void DequantizeRowQ5_0(const BlockQ5_0* x, float* y, int64_t n);
void DequantizeRowQ5_1(const BlockQ5_1* x, float* y, int64_t n);
void DequantizeRowQ2_K(const BlockQ2_K* x, float* y, int64_t n);
void DequantizeRowQ3_K(const BlockQ3_K* x, float* y, int64_t n);
void DequantizeRowQ5_K(const BlockQ5_K* x, float* y, int64_t n);
void DequantizeRowIQ4_NL(const BlockIQ4_NL* x, float* y, int64_t n);
void DequantizeRowIQ4_XS(const BlockIQ4_XS* x, float* y, int64_t n);
void DequantizeRowMXFP4(const BlockMXFP4* x, float* y, int64_t n);

// The signed scale (-32..31) of IQ4_XS sub-block j (0..7): its values are d * scale * level.
int IQ4XSScale(const BlockIQ4_XS& x, int j);

// Half the scale of an E8M0 exponent, 2^(e - 128) (MXFP4's values are stored doubled):
// exact for every e, denormal for e < 2.
inline float E8M0ToFloatHalf(uint8_t e) {
  constexpr uint32_t kSmallest = 0x00200000;  // 2^-128, the bits of e = 0.
  constexpr int kMantissaBits = 23;
  const uint32_t bits = e < 2 ? kSmallest << e : static_cast<uint32_t>(e - 1) << kMantissaBits;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

}  // namespace tg

#endif  // TENSORGRID_CORE_QUANTS_H_
