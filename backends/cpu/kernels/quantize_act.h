// Quantization of f32 activations for the quantized dot kernels: the same values as the
// reference quantizers of core/quants.h (QuantizeRowQ8_0 / QuantizeRowQ8_K, bit-exact), but
// vectorized and writing into the kernels' own layouts. Pure functions, thread-safe.
#ifndef TENSORGRID_BACKENDS_CPU_KERNELS_QUANTIZE_ACT_H_
#define TENSORGRID_BACKENDS_CPU_KERNELS_QUANTIZE_ACT_H_

#include <cstdint>

namespace tg::cpu {

// Quantizes 32 values as QuantizeRowQ8_0 does: writes the 32 quants and returns the scale as
// dequantization sees it (the f16-rounded d, widened back to f32).
float QuantizeBlockQ8_0(const float* x, int8_t* qs);

// Quantizes 256 values as QuantizeRowQ8_K does: writes the 256 quants and returns d.
float QuantizeBlockQ8_K(const float* x, int8_t* qs);

}  // namespace tg::cpu

#endif  // TENSORGRID_BACKENDS_CPU_KERNELS_QUANTIZE_ACT_H_
