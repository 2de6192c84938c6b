// The int8 tile matrix multiply (mmq.cu, as ggml's MMQ) as shared host/device code: how a
// group of 32 quantized weights becomes 32 int8 values with scales, the per-group float
// update, the shared-memory tile geometry, and the fragment layouts of the warp-level mma
// instructions (PTX ISA, "Matrix Fragments for mma.m16n8k16", integer and f16 types; the
// sm_75 forms m8n8k16 and m16n8k8 are halves of them). The unit tests check each against
// core's dequantization and an emulated tile product. Pure; thread-safe.
//
// Weights of every type become, per group g of 32 (the K unit of the tile):
//   w[j] = scale_lo * q[j] - min   (j < 16)        w[j] = scale_hi * q[j] - min   (j >= 16)
// with q int8: Q4_0 q - 8 (scale d), Q8_0 q (d), Q4_K the 4-bit q (d * sc, min dmin * m of
// the sub-block), Q6_K q - 32 (d * sc of each 16). Activations are the Q8_1 blocks the
// matrix-vector kernel uses (the CPU's activation scales), so the group's contribution to
// out[row, col] is
//   d_a * (scale_lo * sum_{j<16} q[j] a[j] + scale_hi * sum_{j>=16} q[j] a[j] - min * sum_a)
// where the two sums are int8 tensor-core dot products and sum_a the block's quant sum.
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
  float lo;   // scale of quants 0..15.
  float hi;   // scale of quants 16..31.
  float min;  // subtracted from every value (Q4_K's mins; 0 otherwise).
};

// Group g (32 weights starting at element 32 g) of a quantized row as int8 values, packed
// four per word (byte i of q[w] is value 4 w + i), and its scales.
TG_HD GroupScales UnpackGroup32(int type, const char* row, int64_t g, uint32_t q[8]) {
  GroupScales s{0.0f, 0.0f, 0.0f};
  auto pack = [](int v0, int v1, int v2, int v3) {
    return (static_cast<uint32_t>(v0) & 0xffu) | ((static_cast<uint32_t>(v1) & 0xffu) << 8) |
           ((static_cast<uint32_t>(v2) & 0xffu) << 16) |
           ((static_cast<uint32_t>(v3) & 0xffu) << 24);
  };
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
        q[w] = pack(lo[0], lo[1], lo[2], lo[3]);
        q[w + 4] = pack(hi[0], hi[1], hi[2], hi[3]);
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
    case kTypeQ4_K: {
      const BlockQ4_K& b = reinterpret_cast<const BlockQ4_K*>(row)[g / 8];
      const int sub = static_cast<int>(g % 8);
      const int shift = 4 * (sub % 2);
      for (int w = 0; w < 8; ++w) {
        q[w] = (LoadU32Unaligned2(b.qs + 32 * (sub / 2) + 4 * w) >> shift) & 0x0F0F0F0Fu;
      }
      uint8_t sc, m;
      UnpackScaleMinK4(sub, b.scales, &sc, &m);
      s.lo = s.hi = HalfToF32(b.d) * sc;
      s.min = HalfToF32(b.dmin) * m;
      return s;
    }
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
        q[w] = pack(x[0], x[1], x[2], x[3]);
      }
      const float d = HalfToF32(b.d);
      s.lo = d * b.scales[8 * h + 2 * quarter];
      s.hi = d * b.scales[8 * h + 2 * quarter + 1];
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
