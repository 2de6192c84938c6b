// Block layouts of the quantized types, byte-for-byte those of ggml/GGUF.
// Halves are stored as raw IEEE binary16 bits (see core/fp16.h).
#ifndef TENSORGRID_CORE_QUANT_BLOCKS_H_
#define TENSORGRID_CORE_QUANT_BLOCKS_H_

#include <cstdint>

namespace tg {

inline constexpr int kQK4_0 = 32;
inline constexpr int kQK8_0 = 32;
inline constexpr int kQK_K = 256;         // super-block size of the k-quants.
inline constexpr int kKScaleSize = 12;    // packed 6-bit scales/mins of Q4_K.

struct BlockQ4_0 {
  uint16_t d;               // scale (f16).
  uint8_t qs[kQK4_0 / 2];   // nibbles: low = element j, high = element j + 16; value = (q - 8) * d.
};
static_assert(sizeof(BlockQ4_0) == 18);

struct BlockQ8_0 {
  uint16_t d;          // scale (f16).
  int8_t qs[kQK8_0];   // value = q * d.
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ4_K {
  uint16_t d;                   // super-block scale for the quantized scales (f16).
  uint16_t dmin;                // super-block scale for the quantized mins (f16).
  uint8_t scales[kKScaleSize];  // 8 scales + 8 mins, 6 bits each.
  uint8_t qs[kQK_K / 2];        // 4-bit quants.
};
static_assert(sizeof(BlockQ4_K) == 144);

struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];      // lower 4 bits of the quants.
  uint8_t qh[kQK_K / 4];      // upper 2 bits.
  int8_t scales[kQK_K / 16];  // 8-bit scales of 16-element groups.
  uint16_t d;                 // super-block scale (f16).
};
static_assert(sizeof(BlockQ6_K) == 210);

// Activation format for dot products with k-quants (never a tensor type, as in ggml).
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];  // sums of each group of 16 quants.
};
static_assert(sizeof(BlockQ8_K) == 292);

}  // namespace tg

#endif  // TENSORGRID_CORE_QUANT_BLOCKS_H_
