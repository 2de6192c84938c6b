// Numerics shared by the CUDA kernels and the host (unit tests, reference paths): f16/bf16
// conversions, the per-element dequantization of every block type (the index math the
// GET_ROWS, CPY and to-F16 kernels run), the reference quantizers of the types a kernel may
// write (Q8_0, Q4_0, bit-exact with core/quants.cc), and the Q8_1 activation blocks of the
// quantized matrix-vector kernel with their per-block dot products.
//
// Q8_1 activations: 32 int8 quants with a float scale d and the integer sum of the quants
// (which carries the offset of Q4_0 and the mins of Q4_K exactly). The scales mirror the
// CPU's activation formats, so that both devices see the same integers: for Q4_0/Q8_0
// weights each block of 32 is quantized as QuantizeRowQ8_0 does (d rounded through f16), for
// Q4_K/Q6_K each super-block of 256 as QuantizeRowQ8_K does (one d for its 8 blocks).
// Pure functions; thread-safe.
#ifndef TENSORGRID_BACKENDS_CUDA_QUANT_MATH_H_
#define TENSORGRID_BACKENDS_CUDA_QUANT_MATH_H_

#include <cmath>
#include <cstdint>
#include <cstring>

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

// Elements that share one activation scale: 32 for Q4_0/Q8_0 weights, 256 for the k-quants.
TG_HD int ActGroup(int weight_type) {
  return weight_type == kTypeQ4_K || weight_type == kTypeQ6_K ? kQK_K : kQK8_1;
}

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

TG_HD float DotQ4_K(const BlockQ4_K& w, int sub, const BlockQ8_1& a) {
  uint8_t sc, m;
  UnpackScaleMinK4(sub, w.scales, &sc, &m);
  const uint8_t* q = w.qs + 32 * (sub / 2);
  const int shift = 4 * (sub % 2);
  int sumi = 0;
  for (int k = 0; k < 8; ++k) {
    const uint32_t v = (LoadU32Unaligned2(q + 4 * k) >> shift) & 0x0F0F0F0Fu;
    sumi = Dp4a(static_cast<int>(v), LoadQ8x4(a.qs + 4 * k), sumi);
  }
  return HalfToF32(w.d) * sc * a.d * static_cast<float>(sumi) -
         HalfToF32(w.dmin) * m * a.d * static_cast<float>(a.sum);
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

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_QUANT_MATH_H_
