// Packed GEMM for Q8_0 / Q4_0 weights against Q8_0 activations on AVX-512 VNNI (prefill).
//
// The row-wise tile kernels spend most of their time on per-block scale arithmetic: every
// 32-element block of every (row, column) pair needs its own scale product and
// int-to-float conversion. Here a tile of 16 weight rows is first packed (per thread, once
// per column block, so the cost is spread over hundreds of activation columns) with the
// rows across the vector lanes: for block b, 8 vectors hold 4 consecutive quants of each
// row per lane, and one vector holds the 16 row scales. A column then costs, per block,
// 8 VPDPBUSD with its quants broadcast 4 at a time, one conversion, one scale multiply
// and one FMA for all 16 rows.
//
// VPDPBUSD multiplies unsigned by signed bytes, so the weights are stored unsigned (Q4_0:
// the raw nibble q + 8; Q8_0: q + 128) and the activations signed; the offset times the
// block's activation sum is subtracted through the accumulator's initial value, which the
// activation format carries per block.
#include "backends/cpu/kernels/qgemm.h"

#include <cstring>

#include "backends/cpu/kernels/quantize_act.h"
#include "backends/cpu/kernels/vec_dot_simd.h"
#include "core/fp16.h"
#include "core/quant_blocks.h"

namespace tg::cpu {
namespace {

constexpr int kGroups = kQK8_0 / 4;  // 4-byte groups per block: one vector each.

// One block of activations: Q8_0 quants, the f32 scale and -offset * sum(quants).
struct ActBlock {
  int8_t qs[kQK8_0];
  float d;
  int32_t corr;
};
static_assert(sizeof(ActBlock) == 40);

// One block of a packed tile: the 16 row scales, then group g's quants of row r at
// q[g][4 r .. 4 r + 3].
struct alignas(64) PackedBlock {
  float d[kQGemmRows];
  uint8_t q[kGroups][4 * kQGemmRows];
};
static_assert(sizeof(PackedBlock) == 576);

int WeightOffset(DType type) { return type == DType::kQ4_0 ? 8 : 128; }

}  // namespace

bool QGemmSupports(DType type) {
#if defined(TG_CPU_AVX512)
  return type == DType::kQ8_0 || type == DType::kQ4_0;
#else
  (void)type;
  return false;
#endif
}

size_t QGemmActRowBytes(int64_t k) { return static_cast<size_t>(k / kQK8_0) * sizeof(ActBlock); }

void QGemmActFromF32(DType type, const float* x, void* y, int64_t k) {
  ActBlock* out = static_cast<ActBlock*>(y);
  const int offset = WeightOffset(type);
  for (int64_t i = 0; i < k / kQK8_0; ++i) {
    out[i].d = QuantizeBlockQ8_0(x + i * kQK8_0, out[i].qs);
#if defined(TG_CPU_SIMD)
    out[i].corr = -offset * simd::SumI8(out[i].qs, kQK8_0);
#else
    int sum = 0;
    for (int j = 0; j < kQK8_0; ++j) sum += out[i].qs[j];
    out[i].corr = -offset * sum;
#endif
  }
}

size_t QGemmPackBytes(int64_t k) { return static_cast<size_t>(k / kQK8_0) * sizeof(PackedBlock); }

#if defined(TG_CPU_AVX512)
// Gathers put the 16 rows across the lanes directly: one 4-byte gather per group of quants
// (two groups per gather for Q4_0's nibbles) and one for the scales.
void QGemmPack(DType type, int64_t k, const char* a, size_t a_stride, int rows, void* pack) {
  const int64_t nblocks = k / kQK8_0;
  PackedBlock* out = static_cast<PackedBlock*>(pack);
  const __mmask16 m = static_cast<__mmask16>((1u << rows) - 1);
  const __m512i row_offsets =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int32_t>(a_stride)));
  const __m512i zero = _mm512_setzero_si512();
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const bool q4 = type == DType::kQ4_0;
  const size_t block_bytes = q4 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  for (int64_t b = 0; b < nblocks; ++b) {
    const char* base = a + b * block_bytes;
    const __m512i d = _mm512_mask_i32gather_epi32(zero, m, row_offsets, base, 1);
    _mm512_store_ps(out[b].d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d)));
    if (q4) {
      for (int g = 0; g < kGroups / 2; ++g) {
        const __m512i v = _mm512_mask_i32gather_epi32(zero, m, row_offsets, base + 2 + 4 * g, 1);
        _mm512_store_si512(out[b].q[g], _mm512_and_si512(v, low4));
        _mm512_store_si512(out[b].q[g + kGroups / 2],
                           _mm512_and_si512(_mm512_srli_epi16(v, 4), low4));
      }
    } else {
      const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
      for (int g = 0; g < kGroups; ++g) {
        const __m512i v = _mm512_mask_i32gather_epi32(zero, m, row_offsets, base + 2 + 4 * g, 1);
        _mm512_store_si512(out[b].q[g], _mm512_xor_si512(v, flip));
      }
    }
  }
}
#else
void QGemmPack(DType, int64_t, const char*, size_t, int, void*) {}
#endif

#if defined(TG_CPU_AVX512)
namespace {

template <int C>
void Tile(int64_t nblocks, const PackedBlock* w, const ActBlock* const* y, __m512* acc) {
  for (int j = 0; j < C; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nblocks; ++b) {
    __m512i q[kGroups];
    for (int g = 0; g < kGroups; ++g) q[g] = _mm512_load_si512(w[b].q[g]);
    const __m512 dx = _mm512_load_ps(w[b].d);
    for (int j = 0; j < C; ++j) {
      const ActBlock& yb = y[j][b];
      const int32_t* yq = reinterpret_cast<const int32_t*>(yb.qs);
      // Two chains of 4 shorten the dependency on the VPDPBUSD latency.
      __m512i s0 = _mm512_set1_epi32(yb.corr), s1 = _mm512_setzero_si512();
      for (int g = 0; g < kGroups; g += 2) {
        int32_t v0, v1;
        std::memcpy(&v0, yq + g, 4);
        std::memcpy(&v1, yq + g + 1, 4);
        s0 = _mm512_dpbusd_epi32(s0, q[g], _mm512_set1_epi32(v0));
        s1 = _mm512_dpbusd_epi32(s1, q[g + 1], _mm512_set1_epi32(v1));
      }
      const __m512 s = _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1));
      acc[j] = _mm512_fmadd_ps(s, _mm512_mul_ps(dx, _mm512_set1_ps(yb.d)), acc[j]);
    }
  }
}

}  // namespace

void QGemmTile(int64_t k, const void* pack, int rows, const void* const* b, int cols,
               float* const* c) {
  const int64_t nblocks = k / kQK8_0;
  const PackedBlock* w = static_cast<const PackedBlock*>(pack);
  const ActBlock* y[kQGemmCols];
  for (int j = 0; j < cols; ++j) y[j] = static_cast<const ActBlock*>(b[j]);
  __m512 acc[kQGemmCols];
  switch (cols) {
    case 1:
      Tile<1>(nblocks, w, y, acc);
      break;
    case 2:
      Tile<2>(nblocks, w, y, acc);
      break;
    case 3:
      Tile<3>(nblocks, w, y, acc);
      break;
    case 4:
      Tile<4>(nblocks, w, y, acc);
      break;
    case 5:
      Tile<5>(nblocks, w, y, acc);
      break;
    case 6:
      Tile<6>(nblocks, w, y, acc);
      break;
    case 7:
      Tile<7>(nblocks, w, y, acc);
      break;
    default:
      Tile<8>(nblocks, w, y, acc);
      break;
  }
  const __mmask16 m = static_cast<__mmask16>((1u << rows) - 1);
  for (int j = 0; j < cols; ++j) _mm512_mask_storeu_ps(c[j], m, acc[j]);
}
#else
void QGemmTile(int64_t, const void*, int, const void* const*, int, float* const*) {}
#endif

}  // namespace tg::cpu
