// Block layouts of the quantized types, byte-for-byte those of ggml/GGUF.
// Halves are stored as raw IEEE binary16 bits (see core/fp16.h).
#ifndef TENSORGRID_CORE_QUANT_BLOCKS_H_
#define TENSORGRID_CORE_QUANT_BLOCKS_H_

#include <cstdint>

namespace tg {

inline constexpr int kQK4_0 = 32;
inline constexpr int kQK5_0 = 32;
inline constexpr int kQK5_1 = 32;
inline constexpr int kQK8_0 = 32;
inline constexpr int kQK4_NL = 32;
inline constexpr int kQKMXFP4 = 32;
inline constexpr int kQK_K = 256;       // super-block size of the k-quants.
inline constexpr int kKScaleSize = 12;  // packed 6-bit scales/mins of Q4_K.

struct BlockQ4_0 {
  uint16_t d;              // scale (f16).
  uint8_t qs[kQK4_0 / 2];  // nibbles: low = element j, high = element j + 16; value = (q - 8) * d.
};
static_assert(sizeof(BlockQ4_0) == 18);

struct BlockQ5_0 {
  uint16_t d;              // scale (f16).
  uint8_t qh[4];           // 5th bits: bit j of the 32-bit word belongs to element j.
  uint8_t qs[kQK5_0 / 2];  // low nibbles: element j (low) and j + 16 (high).
};                         // value = (q - 16) * d.
static_assert(sizeof(BlockQ5_0) == 22);

struct BlockQ5_1 {
  uint16_t d;     // scale (f16).
  uint16_t m;     // minimum (f16): value = q * d + m.
  uint8_t qh[4];  // 5th bits, as in BlockQ5_0.
  uint8_t qs[kQK5_1 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

struct BlockQ8_0 {
  uint16_t d;         // scale (f16).
  int8_t qs[kQK8_0];  // value = q * d.
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ4_K {
  uint16_t d;                   // super-block scale for the quantized scales (f16).
  uint16_t dmin;                // super-block scale for the quantized mins (f16).
  uint8_t scales[kKScaleSize];  // 8 scales + 8 mins, 6 bits each.
  uint8_t qs[kQK_K / 2];        // 4-bit quants.
};
static_assert(sizeof(BlockQ4_K) == 144);

struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // per group of 16: 4-bit scale (low) and 4-bit min (high).
  uint8_t qs[kQK_K / 4];       // 2-bit quants; value = d * sc * q - dmin * m.
  uint16_t d;                  // super-block scale for the scales (f16).
  uint16_t dmin;               // super-block scale for the mins (f16).
};
static_assert(sizeof(BlockQ2_K) == 84);

struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];     // high bit of the 3-bit quants (set: q >= 0).
  uint8_t qs[kQK_K / 4];        // low 2 bits; value = d * (sc - 32) * (q - 4).
  uint8_t scales[kKScaleSize];  // 16 scales, 6 bits each.
  uint16_t d;                   // super-block scale (f16).
};
static_assert(sizeof(BlockQ3_K) == 110);

struct BlockQ5_K {
  uint16_t d;  // as BlockQ4_K, with a 5th bit per quant in qh.
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQK_K / 8];  // bit 2c (2c+1) of qh[l]: element 64c + l (64c + 32 + l).
  uint8_t qs[kQK_K / 2];  // low 4 bits, laid out as BlockQ4_K::qs.
};
static_assert(sizeof(BlockQ5_K) == 176);

struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];      // lower 4 bits of the quants.
  uint8_t qh[kQK_K / 4];      // upper 2 bits.
  int8_t scales[kQK_K / 16];  // 8-bit scales of 16-element groups.
  uint16_t d;                 // super-block scale (f16).
};
static_assert(sizeof(BlockQ6_K) == 210);

// Non-linear 4-bit: each nibble indexes kIQ4NLValues; value = d * kIQ4NLValues[q].
struct BlockIQ4_NL {
  uint16_t d;               // scale (f16).
  uint8_t qs[kQK4_NL / 2];  // element j (low nibble) and j + 16 (high).
};
static_assert(sizeof(BlockIQ4_NL) == 18);

// IQ4_NL's values in super-blocks of 8 x 32 with 6-bit sub-block scales (ls - 32).
struct BlockIQ4_XS {
  uint16_t d;                    // super-block scale (f16).
  uint16_t scales_h;             // top 2 bits of sub-block j's scale at bits 2j.
  uint8_t scales_l[kQK_K / 64];  // low 4 bits: sub-block 2i (low nibble), 2i + 1 (high).
  uint8_t qs[kQK_K / 2];         // 16 bytes per sub-block, nibbles as in BlockIQ4_NL.
};
static_assert(sizeof(BlockIQ4_XS) == 136);

// OCP microscaling FP4: E2M1 values with one shared E8M0 exponent per 32. Blocks are 17
// bytes, so rows and blocks need not be 2-byte aligned.
struct BlockMXFP4 {
  uint8_t e;                 // E8M0 exponent: scale = 2^(e - 127).
  uint8_t qs[kQKMXFP4 / 2];  // element j (low nibble) and j + 16 (high).
};
static_assert(sizeof(BlockMXFP4) == 17);

// The 16 levels of IQ4_NL / IQ4_XS (ggml's kvalues_iq4nl).
inline constexpr int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
// E2M1 values times 2 (ggml's kvalues_mxfp4), so that they are integers; the scale from the
// exponent is halved to match.
inline constexpr int8_t kMXFP4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

// Activation format for dot products with k-quants (never a tensor type, as in ggml).
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];  // sums of each group of 16 quants.
};
static_assert(sizeof(BlockQ8_K) == 292);

}  // namespace tg

#endif  // TENSORGRID_CORE_QUANT_BLOCKS_H_
