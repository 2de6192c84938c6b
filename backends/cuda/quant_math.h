// Numerics shared by the CUDA kernels and the host (unit tests, reference paths): f16/bf16
// conversions, the per-element dequantization of every block type (the index math the
// GET_ROWS, CPY and to-F16 kernels run), the reference quantizers of the types a kernel may
// write (Q8_0, Q4_0, bit-exact with core/quants.cc), and the Q8_1 activation blocks of the
// quantized matrix-vector kernel with their per-block dot products.
//
// Q8_1 activations: 32 int8 quants with a float scale d and the integer sum of the quants
// (which carries the offset of Q4_0 and the mins of Q4_K exactly). The scales mirror the
// CPU's activation formats (backends/cpu/kernels/vec_dot.h), so that both devices see the
// same integers: for the 32-element types (Q4_0, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4) each block
// of 32 is quantized as QuantizeRowQ8_0 does (d rounded through f16), for the super-block
// types (Q2_K .. Q6_K, IQ4_XS) each super-block of 256 as QuantizeRowQ8_K does (one d for its
// 8 blocks).
// Pure functions; thread-safe.
#ifndef TENSORGRID_BACKENDS_CUDA_QUANT_MATH_H_
#define TENSORGRID_BACKENDS_CUDA_QUANT_MATH_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

#include "backends/cuda/host_device.h"
#include "backends/cuda/kernel_types.h"
#include "core/fp16.h"
#include "core/quant_blocks.h"

namespace tg::cuda {

// ---------------------------------------------------------------------------------------
// Scalar conversions.

TG_HD uint32_t F32Bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

TG_HD float BitsToF32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

TG_HD float HalfToF32(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  return tg::HalfToFloat(h);
#endif
}

// Round to nearest even, as F16C and core/fp16.h.
TG_HD uint16_t F32ToHalf(float f) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(f));
#else
  return tg::FloatToHalf(f);
#endif
}

TG_HD float BF16ToF32(uint16_t h) { return BitsToF32(static_cast<uint32_t>(h) << 16); }

// core/fp16.h's FloatToBF16: round to nearest even, NaN stays a quiet NaN.
TG_HD uint16_t F32ToBF16(float f) {
  const uint32_t u = F32Bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 64);
  return static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

// Nearest, ties to even (core's lrint in the default rounding mode).
TG_HD int32_t F32ToI32(float f) {
#if defined(__CUDA_ARCH__)
  return __float2int_rn(f);
#else
  return static_cast<int32_t>(std::lrint(f));
#endif
}

// core/quants.cc's TruncToInt8: truncation toward zero, INT32_MIN for NaN or out of range,
// then the low byte.
TG_HD int8_t TruncToInt8(float v) {
  constexpr float kTwo31 = 2147483648.f;
  const int32_t wide = (v > -kTwo31 && v < kTwo31) ? static_cast<int32_t>(v) : INT32_MIN;
  return static_cast<int8_t>(static_cast<uint32_t>(wide) & 0xffu);
}

// a * b rounded on its own: nvcc would contract a * b - c into one fma (one rounding), which
// core/quants.cc forbids; the dequantizers of the affine types use this to stay bit-exact.
TG_HD float MulRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// core/quants.h's E8M0ToFloatHalf: half the scale of an E8M0 exponent, 2^(e - 128) (MXFP4's
// values are stored doubled), denormal for e < 2.
TG_HD float E8M0Half(uint8_t e) {
  constexpr uint32_t kSmallest = 0x00200000u;  // 2^-128, the bits of e = 0.
  constexpr int kMantissaBits = 23;
  return BitsToF32(e < 2 ? kSmallest << e : static_cast<uint32_t>(e - 1) << kMantissaBits);
}

// ---------------------------------------------------------------------------------------
// The 16-level tables of IQ4_NL/IQ4_XS and MXFP4 as four words each (entry i in byte i % 4
// of word i / 4). Device code may use constexpr scalars but not quant_blocks.h's arrays, so
// the words are scalars, gathered into a Table16 value where a kernel needs one.

struct Table16 {
  uint32_t w[4];
};

constexpr uint32_t TableWord(const int8_t (&t)[16], int word) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<uint8_t>(t[4 * word + i])) << (8 * i);
  return v;
}

inline constexpr uint32_t kIQ4NLWord0 = TableWord(kIQ4NLValues, 0);
inline constexpr uint32_t kIQ4NLWord1 = TableWord(kIQ4NLValues, 1);
inline constexpr uint32_t kIQ4NLWord2 = TableWord(kIQ4NLValues, 2);
inline constexpr uint32_t kIQ4NLWord3 = TableWord(kIQ4NLValues, 3);
inline constexpr uint32_t kMXFP4Word0 = TableWord(kMXFP4Values, 0);
inline constexpr uint32_t kMXFP4Word1 = TableWord(kMXFP4Values, 1);
inline constexpr uint32_t kMXFP4Word2 = TableWord(kMXFP4Values, 2);
inline constexpr uint32_t kMXFP4Word3 = TableWord(kMXFP4Values, 3);

TG_HD Table16 IQ4NLTable() { return {{kIQ4NLWord0, kIQ4NLWord1, kIQ4NLWord2, kIQ4NLWord3}}; }
TG_HD Table16 MXFP4Table() { return {{kMXFP4Word0, kMXFP4Word1, kMXFP4Word2, kMXFP4Word3}}; }

// CUDA's __byte_perm: byte n of the result is byte (s >> 4n) & 7 of the 8 bytes {y, x}.
TG_HD uint32_t BytePerm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const uint64_t pool = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n) {
    r |= static_cast<uint32_t>((pool >> (8 * ((s >> (4 * n)) & 7))) & 0xffu) << (8 * n);
  }
  return r;
#endif
}

// Four table entries at once: byte n of `nibbles` (0..15) indexes the table, byte n of the
// result is the entry (signed).
TG_HD uint32_t Lookup4(uint32_t nibbles, Table16 t) {
  const uint32_t sel = (nibbles & 0xFu) | ((nibbles >> 4) & 0xF0u) | ((nibbles >> 8) & 0xF00u) |
                       ((nibbles >> 12) & 0xF000u);
  const uint32_t lo = BytePerm(t.w[0], t.w[1], sel), hi = BytePerm(t.w[2], t.w[3], sel);
  const uint32_t upper = ((nibbles >> 3) & 0x01010101u) * 0xFFu;  // bytes indexing 8..15.
  return (lo & ~upper) | (hi & upper);
}

// One entry.
TG_HD int TableAt(Table16 t, int i) {
  return static_cast<int8_t>(static_cast<uint8_t>(t.w[i / 4] >> (8 * (i % 4))));
}

// A plain (not block-quantized) element as f32.
TG_HD float LoadAsF32(int type, const char* p) {
  switch (type) {
    case kTypeF16:
      return HalfToF32(*reinterpret_cast<const uint16_t*>(p));
    case kTypeBF16:
      return BF16ToF32(*reinterpret_cast<const uint16_t*>(p));
    case kTypeI32:
      return static_cast<float>(*reinterpret_cast<const int32_t*>(p));
    default:
      return *reinterpret_cast<const float*>(p);
  }
}

TG_HD void StoreFromF32(int type, char* p, float v) {
  switch (type) {
    case kTypeF16:
      *reinterpret_cast<uint16_t*>(p) = F32ToHalf(v);
      return;
    case kTypeBF16:
      *reinterpret_cast<uint16_t*>(p) = F32ToBF16(v);
      return;
    case kTypeI32:
      *reinterpret_cast<int32_t*>(p) = F32ToI32(v);
      return;
    default:
      *reinterpret_cast<float*>(p) = v;
      return;
  }
}

// ---------------------------------------------------------------------------------------
// Dequantization of one element (j: index inside its block).

TG_HD void UnpackScaleMinK4(int j, const uint8_t* packed, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = packed[j] & 63;
    *min = packed[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4));
  }
}

TG_HD float DequantQ4_0(const BlockQ4_0& b, int j) {
  constexpr int kHalf = kQK4_0 / 2;
  const int q = j < kHalf ? (b.qs[j] & 0x0F) : (b.qs[j - kHalf] >> 4);
  return (q - 8) * HalfToF32(b.d);
}

TG_HD float DequantQ8_0(const BlockQ8_0& b, int j) { return b.qs[j] * HalfToF32(b.d); }

// Q4_K: 4 chunks of 64; chunk c holds sub-blocks 2c (low nibbles) and 2c + 1 (high).
TG_HD float DequantQ4_K(const BlockQ4_K& b, int j) {
  const int c = j / 64, within = j % 64, high = within / 32, i = within % 32;
  uint8_t sc, m;
  UnpackScaleMinK4(2 * c + high, b.scales, &sc, &m);
  const float d1 = HalfToF32(b.d) * sc, m1 = HalfToF32(b.dmin) * m;
  const uint8_t byte = b.qs[32 * c + i];
  return d1 * (high ? (byte >> 4) : (byte & 0xF)) - m1;
}

// Q6_K: 2 halves of 128; quarter q of a half takes ql's low (q < 2) or high nibbles of bytes
// [32 * (q & 1), +32) and bits 2q of qh, with the scale of its group of 16.
TG_HD float DequantQ6_K(const BlockQ6_K& b, int j) {
  const int h = j / 128, quarter = (j % 128) / 32, i = j % 32;
  const uint8_t lo = b.ql[64 * h + 32 * (quarter & 1) + i];
  const int q = (((quarter >> 1) ? (lo >> 4) : (lo & 0xF)) |
                 (((b.qh[32 * h + i] >> (2 * quarter)) & 3) << 4)) -
                32;
  return HalfToF32(b.d) * b.scales[8 * h + i / 16 + 2 * quarter] * q;
}

// Q5_0 / Q5_1: the nibble of element j (low: j < 16) and bit j of the 32-bit qh.
TG_HD int Q5Quant(const uint8_t* qs, const uint8_t* qh, int j) {
  const int nib = j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4);
  return nib | (((qh[j / 8] >> (j % 8)) & 1) << 4);
}

TG_HD float DequantQ5_0(const BlockQ5_0& b, int j) {
  return (Q5Quant(b.qs, b.qh, j) - 16) * HalfToF32(b.d);
}

TG_HD float DequantQ5_1(const BlockQ5_1& b, int j) {
  return MulRn(static_cast<float>(Q5Quant(b.qs, b.qh, j)), HalfToF32(b.d)) + HalfToF32(b.m);
}

// Q2_K / Q3_K: group G of 16 takes bits 2 (G % 8 / 2) of qs[32 (G / 8) + 16 (G % 2) + i].
TG_HD int TwoBitQuant(const uint8_t* qs, int j) {
  const int g = j / 16, i = j % 16;
  return (qs[32 * (g / 8) + 16 * (g % 2) + i] >> (2 * ((g % 8) / 2))) & 3;
}

TG_HD float DequantQ2_K(const BlockQ2_K& b, int j) {
  const uint8_t sc = b.scales[j / 16];
  const float dl = HalfToF32(b.d) * (sc & 0xF), ml = HalfToF32(b.dmin) * (sc >> 4);
  return MulRn(dl, static_cast<float>(TwoBitQuant(b.qs, j))) - ml;
}

// Q3_K's scale of group G (-32..31): low 4 bits in nibbles of bytes 0-7, top 2 bits in
// bytes 8-11.
TG_HD int ScaleQ3_K(const uint8_t* packed, int g) {
  const int low = g < 8 ? (packed[g] & 0xF) : (packed[g - 8] >> 4);
  const int high = (packed[8 + g % 4] >> (2 * (g / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// Group G's high bits are bit G / 2 of hmask[16 (G % 2) + i]; clear means q - 4.
TG_HD float DequantQ3_K(const BlockQ3_K& b, int j) {
  const int g = j / 16, i = j % 16;
  const float dl = HalfToF32(b.d) * ScaleQ3_K(b.scales, g);
  const bool high = (b.hmask[16 * (g % 2) + i] >> (g / 2)) & 1;
  return dl * (TwoBitQuant(b.qs, j) - (high ? 0 : 4));
}

// Q5_K: Q4_K's layout plus bit `sub` of qh[i] (sub = 2c + high).
TG_HD float DequantQ5_K(const BlockQ5_K& b, int j) {
  const int c = j / 64, within = j % 64, high = within / 32, i = within % 32;
  const int sub = 2 * c + high;
  uint8_t sc, m;
  UnpackScaleMinK4(sub, b.scales, &sc, &m);
  const float d1 = HalfToF32(b.d) * sc, m1 = HalfToF32(b.dmin) * m;
  const uint8_t byte = b.qs[32 * c + i];
  const int q = (high ? (byte >> 4) : (byte & 0xF)) + (((b.qh[i] >> sub) & 1) << 4);
  return MulRn(d1, static_cast<float>(q)) - m1;
}

// The nibble of element j of a 32-element group: byte j (low) or j - 16 (high).
TG_HD int NibbleAt(const uint8_t* qs, int j) { return j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4); }

TG_HD float DequantIQ4_NL(const BlockIQ4_NL& b, int j) {
  return HalfToF32(b.d) * static_cast<float>(TableAt(IQ4NLTable(), NibbleAt(b.qs, j)));
}

// IQ4_XS's scale of sub-block `sub` (-32..31).
TG_HD int ScaleIQ4_XS(const BlockIQ4_XS& b, int sub) {
  const int low = (b.scales_l[sub / 2] >> (4 * (sub % 2))) & 0xF;
  const int high = (b.scales_h >> (2 * sub)) & 3;
  return (low | (high << 4)) - 32;
}

TG_HD float DequantIQ4_XS(const BlockIQ4_XS& b, int j) {
  const int sub = j / 32;
  const float dl = HalfToF32(b.d) * ScaleIQ4_XS(b, sub);
  return dl * static_cast<float>(TableAt(IQ4NLTable(), NibbleAt(b.qs + 16 * sub, j % 32)));
}

TG_HD float DequantMXFP4(const BlockMXFP4& b, int j) {
  return static_cast<float>(TableAt(MXFP4Table(), NibbleAt(b.qs, j))) * E8M0Half(b.e);
}

// Element i of a quantized row.
TG_HD float DequantAt(int type, const char* row, int64_t i) {
  switch (type) {
    case kTypeQ4_0:
      return DequantQ4_0(reinterpret_cast<const BlockQ4_0*>(row)[i / kQK4_0], i % kQK4_0);
    case kTypeQ8_0:
      return DequantQ8_0(reinterpret_cast<const BlockQ8_0*>(row)[i / kQK8_0], i % kQK8_0);
    case kTypeQ4_K:
      return DequantQ4_K(reinterpret_cast<const BlockQ4_K*>(row)[i / kQK_K], i % kQK_K);
    case kTypeQ6_K:
      return DequantQ6_K(reinterpret_cast<const BlockQ6_K*>(row)[i / kQK_K], i % kQK_K);
    case kTypeQ5_0:
      return DequantQ5_0(reinterpret_cast<const BlockQ5_0*>(row)[i / kQK5_0], i % kQK5_0);
    case kTypeQ5_1:
      return DequantQ5_1(reinterpret_cast<const BlockQ5_1*>(row)[i / kQK5_1], i % kQK5_1);
    case kTypeQ2_K:
      return DequantQ2_K(reinterpret_cast<const BlockQ2_K*>(row)[i / kQK_K], i % kQK_K);
    case kTypeQ3_K:
      return DequantQ3_K(reinterpret_cast<const BlockQ3_K*>(row)[i / kQK_K], i % kQK_K);
    case kTypeQ5_K:
      return DequantQ5_K(reinterpret_cast<const BlockQ5_K*>(row)[i / kQK_K], i % kQK_K);
    case kTypeIQ4_NL:
      return DequantIQ4_NL(reinterpret_cast<const BlockIQ4_NL*>(row)[i / kQK4_NL], i % kQK4_NL);
    case kTypeIQ4_XS:
      return DequantIQ4_XS(reinterpret_cast<const BlockIQ4_XS*>(row)[i / kQK_K], i % kQK_K);
    case kTypeMXFP4:
      return DequantMXFP4(reinterpret_cast<const BlockMXFP4*>(row)[i / kQKMXFP4], i % kQKMXFP4);
    default:
      return 0.0f;
  }
}

// ---------------------------------------------------------------------------------------
// Reference quantizers of the block types kernels write (SET_ROWS, CPY), bit-exact with
// core/quants.cc (which forbids FMA contraction; these have no a*b+c to contract).

TG_HD void QuantizeBlockQ8_0Ref(const float* x, BlockQ8_0* y) {
  float amax = 0.0f;
  for (int j = 0; j < kQK8_0; ++j) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
  const float d = amax / 127;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y->d = F32ToHalf(d);
  for (int j = 0; j < kQK8_0; ++j) y->qs[j] = TruncToInt8(roundf(x[j] * id));
}

TG_HD void QuantizeBlockQ4_0Ref(const float* x, BlockQ4_0* y) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kQK4_0; ++j) {
    if (amax < fabsf(x[j])) {
      amax = fabsf(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y->d = F32ToHalf(d);
  constexpr int kHalf = kQK4_0 / 2;
  for (int j = 0; j < kHalf; ++j) {
    const int lo = static_cast<int>(TruncToInt8(x[j] * id + 8.5f));
    const int hi = static_cast<int>(TruncToInt8(x[j + kHalf] * id + 8.5f));
    y->qs[j] = static_cast<uint8_t>((lo < 15 ? lo : 15) | ((hi < 15 ? hi : 15) << 4));
  }
}

// ---------------------------------------------------------------------------------------
// Q8_1 activations for the quantized matrix-vector kernel.

inline constexpr int kQK8_1 = 32;
inline constexpr int kQ8Max = 127;

struct BlockQ8_1 {
  float d;      // scale: value = q * d.
  int32_t sum;  // sum of the 32 quants.
  int8_t qs[kQK8_1];
};
static_assert(sizeof(BlockQ8_1) == 40, "kernels index BlockQ8_1 arrays by this size");

// Elements that share one activation scale: 32 for the 32-element types, 256 for the
// super-block types (the CPU's Q8_0 and Q8_K activations).
TG_HD int ActGroup(int weight_type) { return BlockElems(weight_type) == kQK_K ? kQK_K : kQK8_1; }

struct ActScale {
  float id;  // multiplies x before rounding.
  float d;   // dequantization scale as stored.
};

// Groups of 32 (QuantizeRowQ8_0's scale, d rounded through f16 as the CPU's blocks store it).
TG_HD ActScale ActScale32(float amax) {
  const float d = amax / kQ8Max;
  return {d != 0.0f ? 1.0f / d : 0.0f, HalfToF32(F32ToHalf(d))};
}
TG_HD int8_t ActQuant32(float x, float id) { return TruncToInt8(roundf(x * id)); }

// Groups of 256 (QuantizeRowQ8_K): x_first is the first element of largest magnitude.
TG_HD ActScale ActScale256(float x_first) {
  if (x_first == 0.0f) return {0.0f, 0.0f};
  const float iscale = -static_cast<float>(kQ8Max) / x_first;
  return {iscale, 1.0f / iscale};
}
TG_HD int8_t ActQuant256(float x, float iscale) {
  const float v = rintf(iscale * x);
  return static_cast<int8_t>(static_cast<int>(v < kQ8Max ? v : kQ8Max));
}

// Host reference of the activation quantization kernel: a row of k values (k a multiple of
// ActGroup(weight_type)) into k / 32 blocks.
TG_HD void QuantizeActRow(int weight_type, const float* x, BlockQ8_1* y, int64_t k) {
  const int group = ActGroup(weight_type);
  for (int64_t g = 0; g < k; g += group) {
    ActScale s;
    if (group == kQK8_1) {
      float amax = 0.0f;
      for (int j = 0; j < group; ++j) amax = fabsf(x[g + j]) > amax ? fabsf(x[g + j]) : amax;
      s = ActScale32(amax);
    } else {
      float amax = 0.0f, first = 0.0f;
      for (int j = 0; j < group; ++j) {
        if (fabsf(x[g + j]) > amax) {
          amax = fabsf(x[g + j]);
          first = x[g + j];
        }
      }
      s = ActScale256(first);
    }
    for (int b = 0; b < group / kQK8_1; ++b) {
      BlockQ8_1& out = y[(g + b * kQK8_1) / kQK8_1];
      out.d = s.d;
      out.sum = 0;
      for (int j = 0; j < kQK8_1; ++j) {
        const float v = x[g + b * kQK8_1 + j];
        out.qs[j] = group == kQK8_1 ? ActQuant32(v, s.id) : ActQuant256(v, s.id);
        out.sum += out.qs[j];
      }
    }
  }
}

// Four int8 products summed into c (the dp4a instruction on the device).
TG_HD int Dp4a(int a, int b, int c) {
#if defined(__CUDA_ARCH__)
  return __dp4a(a, b, c);
#else
  for (int k = 0; k < 4; ++k) {
    c += static_cast<int8_t>(static_cast<uint32_t>(a) >> (8 * k)) *
         static_cast<int8_t>(static_cast<uint32_t>(b) >> (8 * k));
  }
  return c;
#endif
}

// Four bytes of a weight block, which is only 2-byte aligned (18-, 34- and 210-byte blocks).
TG_HD uint32_t LoadU32Unaligned2(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
  return static_cast<uint32_t>(h[0]) | (static_cast<uint32_t>(h[1]) << 16);
#else
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
#endif
}

// Four quants of a BlockQ8_1 (4-byte aligned: blocks are 40 bytes in 4-aligned arrays).
TG_HD int LoadQ8x4(const int8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const int*>(p);
#else
  int v;
  std::memcpy(&v, p, sizeof(v));
  return v;
#endif
}

// Dot products of one group of 32 weights with the activation block a. For the k-quants,
// `sub` (0..7) picks the group of 32 inside the super-block.
TG_HD float DotQ4_0(const BlockQ4_0& w, const BlockQ8_1& a) {
  int sumi = 0;
  for (int k = 0; k < 4; ++k) {
    const uint32_t v = LoadU32Unaligned2(w.qs + 4 * k);
    sumi = Dp4a(static_cast<int>(v & 0x0F0F0F0Fu), LoadQ8x4(a.qs + 4 * k), sumi);
    sumi = Dp4a(static_cast<int>((v >> 4) & 0x0F0F0F0Fu), LoadQ8x4(a.qs + 16 + 4 * k), sumi);
  }
  return HalfToF32(w.d) * a.d * static_cast<float>(sumi - 8 * a.sum);
}

TG_HD float DotQ8_0(const BlockQ8_0& w, const BlockQ8_1& a) {
  int sumi = 0;
  for (int k = 0; k < 8; ++k) {
    sumi = Dp4a(static_cast<int>(LoadU32Unaligned2(reinterpret_cast<const uint8_t*>(w.qs) + 4 * k)),
                LoadQ8x4(a.qs + 4 * k), sumi);
  }
  return HalfToF32(w.d) * a.d * static_cast<float>(sumi);
}

// The 32 quants of sub-block `sub` of a Q4_K block (4 bits) or a Q5_K block (a fifth bit from
// qh), packed four to a word: word k holds quants 4k..4k+3.
template <typename Block>
TG_HD uint32_t KQuantWord(const Block& w, int sub, int k) {
  const uint8_t* q = w.qs + 32 * (sub / 2);
  const uint32_t lo = (LoadU32Unaligned2(q + 4 * k) >> (4 * (sub % 2))) & 0x0F0F0F0Fu;
  if constexpr (std::is_same_v<Block, BlockQ5_K>) {
    return lo | (((LoadU32Unaligned2(w.qh + 4 * k) >> sub) & 0x01010101u) << 4);
  } else {
    return lo;
  }
}

// Q4_K/Q5_K sub-block . Q8_1 activations: d * scale * sum(q a) - dmin * min * sum(a).
template <typename Block>
TG_HD float DotScaleMinK(const Block& w, int sub, const BlockQ8_1& a) {
  uint8_t sc, m;
  UnpackScaleMinK4(sub, w.scales, &sc, &m);
  int sumi = 0;
  for (int k = 0; k < 8; ++k) {
    sumi = Dp4a(static_cast<int>(KQuantWord(w, sub, k)), LoadQ8x4(a.qs + 4 * k), sumi);
  }
  return HalfToF32(w.d) * sc * a.d * static_cast<float>(sumi) -
         HalfToF32(w.dmin) * m * a.d * static_cast<float>(a.sum);
}

TG_HD float DotQ4_K(const BlockQ4_K& w, int sub, const BlockQ8_1& a) {
  return DotScaleMinK(w, sub, a);
}

TG_HD float DotQ6_K(const BlockQ6_K& w, int sub, const BlockQ8_1& a) {
  const int h = sub / 4, quarter = sub % 4;
  const uint8_t* ql = w.ql + 64 * h + 32 * (quarter & 1);
  const uint8_t* qh = w.qh + 32 * h;
  const int8_t* sc = w.scales + 8 * h + 2 * quarter;
  const int lshift = 4 * (quarter >> 1), hshift = 2 * quarter;
  int acc = 0;
  for (int g = 0; g < 2; ++g) {  // two groups of 16, each with its own scale.
    int sumi = 0, suma = 0;
    for (int k = 0; k < 4; ++k) {
      const int idx = 16 * g + 4 * k;
      const uint32_t lo = (LoadU32Unaligned2(ql + idx) >> lshift) & 0x0F0F0F0Fu;
      const uint32_t hi = ((LoadU32Unaligned2(qh + idx) >> hshift) & 0x03030303u) << 4;
      const int av = LoadQ8x4(a.qs + idx);
      sumi = Dp4a(static_cast<int>(lo | hi), av, sumi);  // quants 0..63 before the -32.
      suma = Dp4a(0x01010101, av, suma);
    }
    acc += sc[g] * (sumi - 32 * suma);
  }
  return HalfToF32(w.d) * a.d * static_cast<float>(acc);
}

// Four bytes of an MXFP4 block (17 bytes: no alignment at all), one byte load each.
TG_HD uint32_t LoadU32Bytes(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

// Bits first .. first + 3 of qh as bit 4 of bytes 0..3 (the fifth bits of four Q5 quants).
TG_HD uint32_t FifthBits4(uint32_t qh, int first) {
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= ((qh >> (first + i)) & 1u) << (8 * i + 4);
  return r;
}

// The integer dot product of a Q5_0/Q5_1 block's quants (0..31) with a's.
TG_HD int DotQ5Quants(const uint8_t* qs, const uint8_t* qh_bytes, const BlockQ8_1& a) {
  const uint32_t qh = LoadU32Unaligned2(qh_bytes);
  int sumi = 0;
  for (int k = 0; k < 4; ++k) {
    const uint32_t v = LoadU32Unaligned2(qs + 4 * k);
    const uint32_t lo = (v & 0x0F0F0F0Fu) | FifthBits4(qh, 4 * k);
    const uint32_t hi = ((v >> 4) & 0x0F0F0F0Fu) | FifthBits4(qh, 16 + 4 * k);
    sumi = Dp4a(static_cast<int>(lo), LoadQ8x4(a.qs + 4 * k), sumi);
    sumi = Dp4a(static_cast<int>(hi), LoadQ8x4(a.qs + 16 + 4 * k), sumi);
  }
  return sumi;
}

TG_HD float DotQ5_0(const BlockQ5_0& w, const BlockQ8_1& a) {
  const int sumi = DotQ5Quants(w.qs, w.qh, a);
  return HalfToF32(w.d) * a.d * static_cast<float>(sumi - 16 * a.sum);
}

TG_HD float DotQ5_1(const BlockQ5_1& w, const BlockQ8_1& a) {
  const int sumi = DotQ5Quants(w.qs, w.qh, a);
  return HalfToF32(w.d) * a.d * static_cast<float>(sumi) +
         HalfToF32(w.m) * a.d * static_cast<float>(a.sum);
}

// The integer dot product of 32 table-coded nibbles (IQ4_NL, IQ4_XS, MXFP4 layout) with a's.
// kByteLoads: MXFP4's blocks, which may sit at odd addresses.
template <bool kByteLoads>
TG_HD int DotTableNibbles(const uint8_t* qs, Table16 table, const BlockQ8_1& a) {
  int sumi = 0;
  for (int k = 0; k < 4; ++k) {
    const uint32_t v = kByteLoads ? LoadU32Bytes(qs + 4 * k) : LoadU32Unaligned2(qs + 4 * k);
    sumi = Dp4a(static_cast<int>(Lookup4(v & 0x0F0F0F0Fu, table)), LoadQ8x4(a.qs + 4 * k), sumi);
    sumi = Dp4a(static_cast<int>(Lookup4((v >> 4) & 0x0F0F0F0Fu, table)),
                LoadQ8x4(a.qs + 16 + 4 * k), sumi);
  }
  return sumi;
}

TG_HD float DotIQ4_NL(const BlockIQ4_NL& w, const BlockQ8_1& a) {
  return HalfToF32(w.d) * a.d * static_cast<float>(DotTableNibbles<false>(w.qs, IQ4NLTable(), a));
}

TG_HD float DotMXFP4(const BlockMXFP4& w, const BlockQ8_1& a) {
  return E8M0Half(w.e) * a.d * static_cast<float>(DotTableNibbles<true>(w.qs, MXFP4Table(), a));
}

TG_HD float DotIQ4_XS(const BlockIQ4_XS& w, int sub, const BlockQ8_1& a) {
  const int sumi = DotTableNibbles<false>(w.qs + 16 * sub, IQ4NLTable(), a);
  return HalfToF32(w.d) * static_cast<float>(ScaleIQ4_XS(w, sub)) * a.d * static_cast<float>(sumi);
}

TG_HD float DotQ5_K(const BlockQ5_K& w, int sub, const BlockQ8_1& a) {
  return DotScaleMinK(w, sub, a);
}

// Q2_K / Q3_K: the 32 two-bit quants of group `sub` are bits 2 (sub % 4) of bytes
// qs[32 (sub / 4) + 0..31] (TwoBitQuant's groups 2 sub and 2 sub + 1).
struct HalfDots {
  int dot[2];  // quants . a over elements 0..15 and 16..31.
  int sum[2];  // a's quant sums over the same halves.
};

// kHighBits: Q3_K's bit `sub` of hmask[0..31] as bit 2 of each quant.
template <bool kHighBits>
TG_HD HalfDots DotTwoBitHalves(const uint8_t* qs, const uint8_t* hmask, int sub,
                               const BlockQ8_1& a) {
  const uint8_t* q = qs + 32 * (sub / 4);
  const int shift = 2 * (sub % 4);
  HalfDots r{{0, 0}, {0, 0}};
  for (int k = 0; k < 8; ++k) {
    uint32_t v = (LoadU32Unaligned2(q + 4 * k) >> shift) & 0x03030303u;
    if constexpr (kHighBits) v |= ((LoadU32Unaligned2(hmask + 4 * k) >> sub) & 0x01010101u) << 2;
    const int av = LoadQ8x4(a.qs + 4 * k);
    r.dot[k / 4] = Dp4a(static_cast<int>(v), av, r.dot[k / 4]);
    r.sum[k / 4] = Dp4a(0x01010101, av, r.sum[k / 4]);
  }
  return r;
}

TG_HD float DotQ2_K(const BlockQ2_K& w, int sub, const BlockQ8_1& a) {
  const HalfDots h = DotTwoBitHalves<false>(w.qs, nullptr, sub, a);
  const uint8_t s0 = w.scales[2 * sub], s1 = w.scales[2 * sub + 1];
  const int scaled = (s0 & 0xF) * h.dot[0] + (s1 & 0xF) * h.dot[1];
  const int mins = (s0 >> 4) * h.sum[0] + (s1 >> 4) * h.sum[1];
  return a.d * (HalfToF32(w.d) * static_cast<float>(scaled) -
                HalfToF32(w.dmin) * static_cast<float>(mins));
}

// Quants 0..7 stand for -4..3: each half's dot minus 4 times its activation sum.
TG_HD float DotQ3_K(const BlockQ3_K& w, int sub, const BlockQ8_1& a) {
  const HalfDots h = DotTwoBitHalves<true>(w.qs, w.hmask, sub, a);
  const int acc = ScaleQ3_K(w.scales, 2 * sub) * (h.dot[0] - 4 * h.sum[0]) +
                  ScaleQ3_K(w.scales, 2 * sub + 1) * (h.dot[1] - 4 * h.sum[1]);
  return HalfToF32(w.d) * a.d * static_cast<float>(acc);
}

// Unit u (32 quants, u / 8 the super-block of the k-quants) of a weight row of kType dotted
// with its activation block a: the matrix-vector kernel's inner product.
template <int kType>
TG_HD float UnitDot(const char* w, int64_t u, const BlockQ8_1& a) {
  const int sub = static_cast<int>(u % 8);
  if constexpr (kType == kTypeQ4_0) {
    return DotQ4_0(reinterpret_cast<const BlockQ4_0*>(w)[u], a);
  } else if constexpr (kType == kTypeQ8_0) {
    return DotQ8_0(reinterpret_cast<const BlockQ8_0*>(w)[u], a);
  } else if constexpr (kType == kTypeQ4_K) {
    return DotQ4_K(reinterpret_cast<const BlockQ4_K*>(w)[u / 8], sub, a);
  } else if constexpr (kType == kTypeQ6_K) {
    return DotQ6_K(reinterpret_cast<const BlockQ6_K*>(w)[u / 8], sub, a);
  } else if constexpr (kType == kTypeQ5_0) {
    return DotQ5_0(reinterpret_cast<const BlockQ5_0*>(w)[u], a);
  } else if constexpr (kType == kTypeQ5_1) {
    return DotQ5_1(reinterpret_cast<const BlockQ5_1*>(w)[u], a);
  } else if constexpr (kType == kTypeIQ4_NL) {
    return DotIQ4_NL(reinterpret_cast<const BlockIQ4_NL*>(w)[u], a);
  } else if constexpr (kType == kTypeMXFP4) {
    return DotMXFP4(reinterpret_cast<const BlockMXFP4*>(w)[u], a);
  } else if constexpr (kType == kTypeQ2_K) {
    return DotQ2_K(reinterpret_cast<const BlockQ2_K*>(w)[u / 8], sub, a);
  } else if constexpr (kType == kTypeQ3_K) {
    return DotQ3_K(reinterpret_cast<const BlockQ3_K*>(w)[u / 8], sub, a);
  } else if constexpr (kType == kTypeQ5_K) {
    return DotQ5_K(reinterpret_cast<const BlockQ5_K*>(w)[u / 8], sub, a);
  } else {
    static_assert(kType == kTypeIQ4_XS, "a quantized weight type");
    return DotIQ4_XS(reinterpret_cast<const BlockIQ4_XS*>(w)[u / 8], sub, a);
  }
}

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_QUANT_MATH_H_
