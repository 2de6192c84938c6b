// SIMD dot kernel for MXFP4 weights (gpt-oss's experts) on AVX2, against Q8_0-quantized
// activations. (AVX-512 takes vec_dot_block32.cc's one-block-per-vector tiles, with VNNI.)
//
// One weight row per 32-bit lane, 8 rows at a time: each 8 rows' block is transposed 4 quant
// bytes at a time (row_lanes.h), its nibbles looked up as the doubled E2M1 level + 12 (0..24,
// unsigned), so that a column's 4 quants broadcast once meet the same 4 weights of all 8 rows
// in one VPMADDUBSW. Four of those add up in 16 bits (4 x 2 x 24 x 127 < 2^15, exact), two
// VPMADDWD widen the block's halves, and the column's correction -12 * sum(q) undoes the
// offset: each lane holds its row's exact integer dot of the block, which one conversion and
// one FMA with the 8 rows' E8M0 scales (computed in a vector from the exponent bytes) times the
// column's scale add to that row's sum. A row's result is the sum over blocks, in block order,
// of fma(exact block dot, dx * dy), whatever the other rows and columns of its tile, so a
// column's bits do not depend on the batch.
//
// Against one block per vector (one row at a time, a horizontal sum per row) this shares
// the scale, the conversion and the FMA between 8 rows and needs no per-block seed: 2x the
// rate in cache, and decode streams the experts at the memory's pace. The rows that follow a
// tile are prefetched while it is computed, as for Q4_0.
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "backends/cpu/kernels/quantize_act.h"
#include "backends/cpu/kernels/row_lanes.h"
#include "backends/cpu/kernels/vec_dot_simd.h"
#include "core/quants.h"

#if defined(TG_CPU_SIMD) && !defined(TG_CPU_AVX512)

namespace tg::cpu::simd {
namespace {

constexpr int kLevelOffset = 12;  // doubled E2M1 levels -12..12, looked up as level + 12.
// Columns per pass: 8 vectors of transposed weights and 4 accumulators fill the 16 registers.
constexpr int kColsPerPass = 4;
// Rows handed to one call in decode (the kernels' streaming_rows): an MoE expert's items are
// this many rows, and each 8 prefetch the next 8.
constexpr int kTileRows = 4 * kLaneRows;

// A block of activations: the Q8_0 quants, the f32 scale, and the correction for the weights'
// offset, -12 * sum(qs).
struct ActMXFP4 {
  float d;
  int32_t corr;
  int8_t qs[kQK8_0];
};
static_assert(sizeof(ActMXFP4) == 40);
static_assert(kQKMXFP4 == kQK8_0);

size_t ActRowBytes(int64_t k) { return static_cast<size_t>(k / kQKMXFP4) * sizeof(ActMXFP4); }

void FromF32(const float* x, void* y, int64_t k) {
  ActMXFP4* out = static_cast<ActMXFP4*>(y);
  for (int64_t i = 0; i < k / kQKMXFP4; ++i) {
    out[i].d = QuantizeBlockQ8_0(x + i * kQKMXFP4, out[i].qs);
    out[i].corr = -kLevelOffset * SumI8(out[i].qs, kQK8_0);
  }
}

// The scales of block `at` of the 8 rows at row0 + offsets[r], row r in lane r: the bits of
// E8M0ToFloatHalf(e), (e - 1) << 23, or below e = 2 the subnormal 2^-128 << e.
inline __m256 RowScales(const char* row0, __m256i offsets, size_t at) {
  const __m256i word = _mm256_i32gather_epi32(reinterpret_cast<const int*>(row0 + at), offsets, 1);
  const __m256i e = _mm256_and_si256(word, _mm256_set1_epi32(0xFF));
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
  const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
  const __m256i is_normal = _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1));
  return _mm256_castsi256_ps(_mm256_blendv_epi8(subnormal, normal, is_normal));
}

// Rows [0, rows) (rows <= 8) of `a` against C columns: c[j][r]. While the blocks go by, the
// `ahead` bytes from `next` (the following rows) are prefetched.
template <int C>
void RowsTimesColumns(int64_t nblocks, const char* a, size_t a_stride, int rows, const char* next,
                      size_t ahead, const ActMXFP4* const* y, float* const* c) {
  static const __m256i kTable = LevelTable(kMXFP4Values, kLevelOffset);
  const __m256i table = kTable;
  const char* row[kLaneRows];
  TileRowPointers(a, a_stride, rows, row);
  alignas(32) int32_t offsets[kLaneRows];
  for (int r = 0; r < kLaneRows; ++r) offsets[r] = static_cast<int32_t>(row[r] - row[0]);
  const __m256i row_offsets = _mm256_load_si256(reinterpret_cast<const __m256i*>(offsets));
  const size_t ahead_step = PrefetchStep(ahead, nblocks);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[C];
  for (int j = 0; j < C; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nblocks; ++i) {
    const size_t at = i * sizeof(BlockMXFP4);
    PrefetchShare<_MM_HINT_T0>(next, i, ahead_step);
    __m256i q[8];
    TransposeNibbles(row, at + offsetof(BlockMXFP4, qs), q);
    for (int g = 0; g < 8; ++g) q[g] = _mm256_shuffle_epi8(table, q[g]);
    const __m256 dx = RowScales(row[0], row_offsets, at);
    for (int j = 0; j < C; ++j) {
      const ActMXFP4& yb = y[j][i];
      __m256i lo = _mm256_maddubs_epi16(q[0], BroadcastQuad(yb.qs));
      __m256i hi = _mm256_maddubs_epi16(q[4], BroadcastQuad(yb.qs + 16));
      for (int g = 1; g < 4; ++g) {
        lo = _mm256_add_epi16(lo, _mm256_maddubs_epi16(q[g], BroadcastQuad(yb.qs + 4 * g)));
        hi =
            _mm256_add_epi16(hi, _mm256_maddubs_epi16(q[g + 4], BroadcastQuad(yb.qs + 16 + 4 * g)));
      }
      const __m256i dot = _mm256_add_epi32(
          _mm256_add_epi32(_mm256_madd_epi16(lo, ones), _mm256_madd_epi16(hi, ones)),
          _mm256_set1_epi32(yb.corr));
      acc[j] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dx, _mm256_set1_ps(yb.d)), acc[j]);
    }
  }
  for (int j = 0; j < C; ++j) StoreLaneRows(acc[j], rows, c[j]);
}

// The tile entry: rows 8 at a time, columns in passes of kColsPerPass; the first pass over
// each 8 rows prefetches the next 8.
void MXFP4Tile(int64_t k, const void* a, size_t a_stride, int rows, int ahead_rows,
               const void* const* b, int cols, float* const* c) {
  const int64_t nblocks = k / kQKMXFP4;
  ForEachRowGroup(a, a_stride, rows, ahead_rows, kLaneRows, [&](const RowGroup& g) {
    ByColumnPasses<kColsPerPass>(cols, [&](auto cols_c, int j0) {
      constexpr int kC = decltype(cols_c)::value;
      const ActMXFP4* y[kC];
      float* out[kC];
      for (int j = 0; j < kC; ++j) {
        y[j] = static_cast<const ActMXFP4*>(b[j0 + j]);
        out[j] = c[j0 + j] + g.first;
      }
      const size_t ahead = j0 == 0 ? g.ahead : 0;
      RowsTimesColumns<kC>(nblocks, g.at, a_stride, g.rows, g.next, ahead, y, out);
    });
  });
}

}  // namespace

const DotKernels kDotMXFP4{FromF32, ActRowBytes, MXFP4Tile, kTileRows};

}  // namespace tg::cpu::simd

#endif  // TG_CPU_SIMD && !TG_CPU_AVX512
