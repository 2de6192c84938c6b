// The int8 tile matrix multiply (mmq.cu, as ggml's MMQ) as shared host/device code: how a
// group of 32 quantized weights becomes 32 int8 values with scales, the per-group float
// update, the shared-memory tile geometry, and the fragment layouts of the warp-level mma
// instructions (PTX ISA, "Matrix Fragments for mma.m16n8k16", integer and f16 types; the
// sm_75 forms m8n8k16 and m16n8k8 are halves of them). The unit tests check each against
// core's dequantization and an emulated tile product. Pure; thread-safe.
//
// Weights of every type become, per group g of 32 (the K unit of the tile):
//   w[j] = scale_lo * q[j] - min   (j < 16)        w[j] = scale_hi * q[j] - min_hi   (j >= 16)
// with q int8: Q4_0 q - 8 (scale d), Q5_0 q - 16 (d), Q5_1 q (d, min -m), Q8_0 q (d), IQ4_NL
// and MXFP4 their table's values (d; half the E8M0 scale), Q4_K/Q5_K the 4/5-bit q (d * sc,
// min dmin * m of the sub-block), IQ4_XS table values (d * (ls - 32)), Q6_K q - 32 and Q3_K
// q - 4 (d * sc of each 16), Q2_K the 2-bit q (d * sc and min dmin * m of each 16). min_hi
// equals min except for Q2_K. Activations are the Q8_1 blocks the matrix-vector kernel uses
// (the CPU's activation scales), so the group's contribution to out[row, col] is
//   d_a * (scale_lo * sum_{j<16} q[j] a[j] + scale_hi * sum_{j>=16} q[j] a[j] - min * sum_a)
// where the two sums are int8 tensor-core dot products and sum_a the block's quant sum; for
// Q2_K the min term is min * sum_{j<16} a[j] + min_hi * sum_{j>=16} a[j] (GroupUpdateOf).
#ifndef TENSORGRID_BACKENDS_CUDA_MMQ_TILE_H_
#define TENSORGRID_BACKENDS_CUDA_MMQ_TILE_H_

#include <cstdint>

#include "backends/cuda/host_device.h"
#include "backends/cuda/kernel_types.h"
#include "backends/cuda/quant_math.h"

namespace tg::cuda {

// Tile of one block: kMmqRows weight rows x kMmqCols activation columns, K in stages of
// kMmqK (one k-quant super-block, 8 groups). 4 warps, each 16 rows x 64 columns.
inline constexpr int kMmqRows = 64;
inline constexpr int kMmqCols = 64;
inline constexpr int kMmqK = 256;
inline constexpr int kMmqGroups = kMmqK / 32;
inline constexpr int kMmqThreads = 128;
// Bytes per tile row in shared memory: 16 more than kMmqK keeps rows 16-byte aligned and
// shifts each row by 4 banks, so the 8 rows of a fragment load hit 32 different banks.
inline constexpr int kMmqRowBytes = kMmqK + 16;

struct GroupScales {
  float lo;      // scale of quants 0..15.
  float hi;      // scale of quants 16..31.
  float min;     // subtracted from quants 0..15 (the k-quants' mins, -m of Q5_1; else 0).
  float min_hi;  // subtracted from quants 16..31: min, except for Q2_K.
};

// Types whose two halves of a group have different mins (Q2_K): the tile needs the
// activations' sum over quants 16..31 as well.
TG_HD constexpr bool HasSplitMins(int type) { return type == kTypeQ2_K; }

// Packs four int8 values (as ints) into a word, value 0 in byte 0.
TG_HD uint32_t PackBytes(int v0, int v1, int v2, int v3) {
  return (static_cast<uint32_t>(v0) & 0xffu) | ((static_cast<uint32_t>(v1) & 0xffu) << 8) |
         ((static_cast<uint32_t>(v2) & 0xffu) << 16) | ((static_cast<uint32_t>(v3) & 0xffu) << 24);
}

// Subtracts `offset` from each byte of v (bytes 0..255 holding values >= 0).
TG_HD uint32_t OffsetBytes(uint32_t v, int offset) {
  return PackBytes(static_cast<int>(v & 0xff) - offset, static_cast<int>((v >> 8) & 0xff) - offset,
                   static_cast<int>((v >> 16) & 0xff) - offset,
                   static_cast<int>((v >> 24) & 0xff) - offset);
}

// The 16 + 16 table-coded nibbles of IQ4_NL/IQ4_XS/MXFP4 as their table values.
template <bool kByteLoads>
TG_HD void UnpackTableNibbles(const uint8_t* qs, Table16 table, uint32_t q[8]) {
  for (int w = 0; w < 4; ++w) {
    const uint32_t v = kByteLoads ? LoadU32Bytes(qs + 4 * w) : LoadU32Unaligned2(qs + 4 * w);
    q[w] = Lookup4(v & 0x0F0F0F0Fu, table);
    q[w + 4] = Lookup4((v >> 4) & 0x0F0F0F0Fu, table);
  }
}

// The 32 two-bit quants of Q2_K/Q3_K group `sub` (DotTwoBitHalves' layout), 0..3, with Q3_K's
// high bit as bit 2 when hmask is given.
TG_HD void UnpackTwoBits(const uint8_t* qs, const uint8_t* hmask, int sub, uint32_t q[8]) {
  const uint8_t* p = qs + 32 * (sub / 4);
  const int shift = 2 * (sub % 4);
  for (int w = 0; w < 8; ++w) {
    q[w] = (LoadU32Unaligned2(p + 4 * w) >> shift) & 0x03030303u;
    if (hmask != nullptr) q[w] |= ((LoadU32Unaligned2(hmask + 4 * w) >> sub) & 0x01010101u) << 2;
  }
}

// Group g (32 weights starting at element 32 g) of a quantized row as int8 values, packed
// four per word (byte i of q[w] is value 4 w + i), and its scales.
// A Q4_K or Q5_K group `sub` (quant_math.h's KQuantWord) with its scale and min.
template <typename Block>
TG_HD GroupScales ScaleMinKGroup(const Block& b, int sub, uint32_t q[8]) {
  for (int w = 0; w < 8; ++w) q[w] = KQuantWord(b, sub, w);
  uint8_t sc, m;
  UnpackScaleMinK4(sub, b.scales, &sc, &m);
  GroupScales s{0.0f, 0.0f, 0.0f, 0.0f};
  s.lo = s.hi = HalfToF32(b.d) * sc;
  s.min = s.min_hi = HalfToF32(b.dmin) * m;
  return s;
}

TG_HD GroupScales UnpackGroup32(int type, const char* row, int64_t g, uint32_t q[8]) {
  GroupScales s{0.0f, 0.0f, 0.0f, 0.0f};
  switch (type) {
    case kTypeQ4_0: {
      const BlockQ4_0& b = reinterpret_cast<const BlockQ4_0*>(row)[g];
      for (int w = 0; w < 4; ++w) {
        const uint32_t v = LoadU32Unaligned2(b.qs + 4 * w);
        int lo[4], hi[4];
        for (int i = 0; i < 4; ++i) {
          lo[i] = static_cast<int>((v >> (8 * i)) & 0xF) - 8;
          hi[i] = static_cast<int>((v >> (8 * i + 4)) & 0xF) - 8;
        }
        q[w] = PackBytes(lo[0], lo[1], lo[2], lo[3]);
        q[w + 4] = PackBytes(hi[0], hi[1], hi[2], hi[3]);
      }
      s.lo = s.hi = HalfToF32(b.d);
      return s;
    }
    case kTypeQ8_0: {
      const BlockQ8_0& b = reinterpret_cast<const BlockQ8_0*>(row)[g];
      for (int w = 0; w < 8; ++w) {
        q[w] = LoadU32Unaligned2(reinterpret_cast<const uint8_t*>(b.qs) + 4 * w);
      }
      s.lo = s.hi = HalfToF32(b.d);
      return s;
    }
    case kTypeQ4_K:
      return ScaleMinKGroup(reinterpret_cast<const BlockQ4_K*>(row)[g / 8],
                            static_cast<int>(g % 8), q);
    case kTypeQ6_K: {
      const BlockQ6_K& b = reinterpret_cast<const BlockQ6_K*>(row)[g / 8];
      const int sub = static_cast<int>(g % 8), h = sub / 4, quarter = sub % 4;
      const uint8_t* ql = b.ql + 64 * h + 32 * (quarter & 1);
      const uint8_t* qh = b.qh + 32 * h;
      const int lshift = 4 * (quarter >> 1), hshift = 2 * quarter;
      for (int w = 0; w < 8; ++w) {
        const uint32_t lo = (LoadU32Unaligned2(ql + 4 * w) >> lshift) & 0x0F0F0F0Fu;
        const uint32_t hi = ((LoadU32Unaligned2(qh + 4 * w) >> hshift) & 0x03030303u) << 4;
        const uint32_t v = lo | hi;  // bytes 0..63; minus 32 per byte below.
        int x[4];
        for (int i = 0; i < 4; ++i) x[i] = static_cast<int>((v >> (8 * i)) & 0xff) - 32;
        q[w] = PackBytes(x[0], x[1], x[2], x[3]);
      }
      const float d = HalfToF32(b.d);
      s.lo = d * b.scales[8 * h + 2 * quarter];
      s.hi = d * b.scales[8 * h + 2 * quarter + 1];
      return s;
    }
    case kTypeQ5_0:
    case kTypeQ5_1: {
      const bool q5_0 = type == kTypeQ5_0;
      const char* blk = row + g * BlockBytesOf(type);
      const uint8_t* qs = q5_0 ? reinterpret_cast<const BlockQ5_0*>(blk)->qs
                               : reinterpret_cast<const BlockQ5_1*>(blk)->qs;
      const uint32_t qh = LoadU32Unaligned2(q5_0 ? reinterpret_cast<const BlockQ5_0*>(blk)->qh
                                                 : reinterpret_cast<const BlockQ5_1*>(blk)->qh);
      const int offset = q5_0 ? 16 : 0;
      for (int w = 0; w < 4; ++w) {
        const uint32_t v = LoadU32Unaligned2(qs + 4 * w);
        q[w] = OffsetBytes((v & 0x0F0F0F0Fu) | FifthBits4(qh, 4 * w), offset);
        q[w + 4] = OffsetBytes(((v >> 4) & 0x0F0F0F0Fu) | FifthBits4(qh, 16 + 4 * w), offset);
      }
      if (q5_0) {
        s.lo = s.hi = HalfToF32(reinterpret_cast<const BlockQ5_0*>(blk)->d);
      } else {
        const BlockQ5_1& b = *reinterpret_cast<const BlockQ5_1*>(blk);
        s.lo = s.hi = HalfToF32(b.d);
        s.min = s.min_hi = -HalfToF32(b.m);
      }
      return s;
    }
    case kTypeIQ4_NL: {
      const BlockIQ4_NL& b = reinterpret_cast<const BlockIQ4_NL*>(row)[g];
      UnpackTableNibbles<false>(b.qs, IQ4NLTable(), q);
      s.lo = s.hi = HalfToF32(b.d);
      return s;
    }
    case kTypeMXFP4: {
      const BlockMXFP4& b = reinterpret_cast<const BlockMXFP4*>(row)[g];
      UnpackTableNibbles<true>(b.qs, MXFP4Table(), q);
      s.lo = s.hi = E8M0Half(b.e);
      return s;
    }
    case kTypeIQ4_XS: {
      const BlockIQ4_XS& b = reinterpret_cast<const BlockIQ4_XS*>(row)[g / 8];
      const int sub = static_cast<int>(g % 8);
      UnpackTableNibbles<false>(b.qs + 16 * sub, IQ4NLTable(), q);
      s.lo = s.hi = HalfToF32(b.d) * static_cast<float>(ScaleIQ4_XS(b, sub));
      return s;
    }
    case kTypeQ5_K:
      return ScaleMinKGroup(reinterpret_cast<const BlockQ5_K*>(row)[g / 8],
                            static_cast<int>(g % 8), q);
    case kTypeQ3_K: {
      const BlockQ3_K& b = reinterpret_cast<const BlockQ3_K*>(row)[g / 8];
      const int sub = static_cast<int>(g % 8);
      UnpackTwoBits(b.qs, b.hmask, sub, q);
      for (int w = 0; w < 8; ++w) q[w] = OffsetBytes(q[w], 4);
      const float d = HalfToF32(b.d);
      s.lo = d * static_cast<float>(ScaleQ3_K(b.scales, 2 * sub));
      s.hi = d * static_cast<float>(ScaleQ3_K(b.scales, 2 * sub + 1));
      return s;
    }
    case kTypeQ2_K: {
      const BlockQ2_K& b = reinterpret_cast<const BlockQ2_K*>(row)[g / 8];
      const int sub = static_cast<int>(g % 8);
      UnpackTwoBits(b.qs, nullptr, sub, q);
      const uint8_t s0 = b.scales[2 * sub], s1 = b.scales[2 * sub + 1];
      const float d = HalfToF32(b.d), dmin = HalfToF32(b.dmin);
      s.lo = d * static_cast<float>(s0 & 0xF);
      s.hi = d * static_cast<float>(s1 & 0xF);
      s.min = dmin * static_cast<float>(s0 >> 4);
      s.min_hi = dmin * static_cast<float>(s1 >> 4);
      return s;
    }
    default:
      for (int w = 0; w < 8; ++w) q[w] = 0;
      return s;
  }
}

// A group's contribution to one output, from its two int8 dot products (quants 0..15 and
// 16..31), the weight group's scales and the activation block's scale and quant sum.
TG_HD float GroupUpdate(int dot_lo, int dot_hi, const GroupScales& w, float act_d, int act_sum) {
  return act_d * (w.lo * static_cast<float>(dot_lo) + w.hi * static_cast<float>(dot_hi) -
                  w.min * static_cast<float>(act_sum));
}

// The same for any type: act_sum_hi is the activation block's quant sum over 16..31, which
// only HasSplitMins types read (the others keep GroupUpdate's arithmetic).
TG_HD float GroupUpdateOf(int type, int dot_lo, int dot_hi, const GroupScales& w, float act_d,
                          int act_sum, int act_sum_hi) {
  if (!HasSplitMins(type)) return GroupUpdate(dot_lo, dot_hi, w, act_d, act_sum);
  return act_d * (w.lo * static_cast<float>(dot_lo) + w.hi * static_cast<float>(dot_hi) -
                  (w.min * static_cast<float>(act_sum - act_sum_hi) +
                   w.min_hi * static_cast<float>(act_sum_hi)));
}

// ---------------------------------------------------------------------------------------
// Fragment layouts (lane 0..31; groupID = lane / 4, threadID_in_group = lane % 4).

struct RowCol {
  int row;
  int col;
};

// int8 m16n8k16, A (16 x 16, row-major): register r (0..1), byte i (0..3).
TG_HD RowCol MmaS8A(int lane, int r, int i) { return {lane / 4 + 8 * r, (lane % 4) * 4 + i}; }
// int8 m16n8k16, B (16 x 8, K x N): byte i of the one register.
TG_HD RowCol MmaS8B(int lane, int i) { return {(lane % 4) * 4 + i, lane / 4}; }
// int8 m8n8k16 (sm_75), A (8 x 16): byte i of the one register; B as MmaS8B.
TG_HD RowCol MmaS8A8(int lane, int i) { return {lane / 4, (lane % 4) * 4 + i}; }

// f16 m16n8k16, A (16 x 16, row-major): register r (0..3), half h (0..1).
TG_HD RowCol MmaF16A(int lane, int r, int h) {
  return {lane / 4 + 8 * (r % 2), (lane % 4) * 2 + h + 8 * (r / 2)};
}
// f16 m16n8k16, B (16 x 8, K x N): register r (0..1), half h.
TG_HD RowCol MmaF16B(int lane, int r, int h) { return {(lane % 4) * 2 + h + 8 * r, lane / 4}; }
// f16 m16n8k8 (sm_75), A (16 x 8): register r (0..1), half h; B (8 x 8): half h.
TG_HD RowCol MmaF16A8(int lane, int r, int h) { return {lane / 4 + 8 * r, (lane % 4) * 2 + h}; }
TG_HD RowCol MmaF16B8(int lane, int h) { return {(lane % 4) * 2 + h, lane / 4}; }

// Accumulators of every m16n8 shape (s32 or f32, 16 x 8): element i (0..3). The m8n8k16
// accumulator (8 x 8, elements 0..1) is its rows 0..7.
TG_HD RowCol MmaC(int lane, int i) { return {lane / 4 + 8 * (i / 2), (lane % 4) * 2 + i % 2}; }

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_MMQ_TILE_H_
