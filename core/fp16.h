// IEEE binary16 and bfloat16 conversions, bit-exact with ggml's (round to nearest even).
#ifndef TENSORGRID_CORE_FP16_H_
#define TENSORGRID_CORE_FP16_H_

#include <cstdint>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace tg {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Portable conversions (the algorithm of Maratyszcza's FP16 library, as ggml uses).
inline float HalfToFloatPortable(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const uint32_t exp_offset = 0xE0u << 23;
  const float exp_scale = BitsFloat(0x7800000u);
  const float normalized = BitsFloat((two_w >> 4) + exp_offset) * exp_scale;
  const uint32_t magic_mask = 126u << 23;
  const float magic_bias = 0.5f;
  const float denormalized = BitsFloat((two_w >> 17) | magic_mask) - magic_bias;
  const uint32_t denormalized_cutoff = 1u << 27;
  const uint32_t result =
      sign | (two_w < denormalized_cutoff ? FloatBits(denormalized) : FloatBits(normalized));
  return BitsFloat(result);
}

inline uint16_t FloatToHalfPortable(float f) {
  const float scale_to_inf = BitsFloat(0x77800000u);
  const float scale_to_zero = BitsFloat(0x08800000u);
  float base = (f < 0 ? -f : f) * scale_to_inf * scale_to_zero;
  const uint32_t w = FloatBits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = BitsFloat((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = FloatBits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

inline float HalfToFloat(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  return HalfToFloatPortable(h);
#endif
}

inline uint16_t FloatToHalf(float f) {
#if defined(__F16C__)
  return _cvtss_sh(f, 0);  // 0 = round to nearest even.
#else
  return FloatToHalfPortable(f);
#endif
}

inline float BF16ToFloat(uint16_t h) { return BitsFloat(static_cast<uint32_t>(h) << 16); }

// Round to nearest even; NaNs stay quiet NaNs (as ggml_compute_fp32_to_bf16).
inline uint16_t FloatToBF16(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 64);
  return static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

}  // namespace tg

#endif  // TENSORGRID_CORE_FP16_H_
