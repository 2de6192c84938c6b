// SIMD dot kernels for Q4_0 weights against Q8_0-quantized activations.
//
// Both ISAs put one weight row in each 32-bit lane of a vector: the 16 quant bytes of a block
// of 8 (AVX2) or 16 (AVX-512) rows are transposed 4 bytes at a time (row_lanes.h), so that
// each of 8 vectors holds the same 4 quants of every row and a column's 4 activation quants
// broadcast once meet all the rows. Each row's result is the sum over blocks, in block order,
// of fma(exact block dot, dx * dy), whatever the number of rows and columns of the call: a
// sequence decoded beside others gives the bits it gives alone, and a prompt's columns the
// bits of decoding them one at a time (AVX-512's packed GEMM, qgemm.h, does the same
// arithmetic; AVX2 packs no Q4_0 and runs prompts through these tiles, 1.4-1.7x faster than
// its GEMM there). The next rows are prefetched while these are computed (rows streamed side
// by side defeat the hardware prefetcher: a 276 MB matrix-vector product of 8 rows at a time
// ran at 0.67x of one row at a time without it, 1.35x with it, 2 threads on an AVX2 EPYC).
//
// AVX-512 (VNNI) keeps a block's 16 rows unsigned (q + 8) in 8 registers while every column of
// the call (up to 8) takes them: 8 VPDPBUSD against the column's quants broadcast, starting
// from its correction -8 * sum(q), then one conversion, one scale multiply and one FMA. On a
// Zen 4 EPYC, 2048-wide model, 2 threads, decoding 8 sequences ran 1.6x faster than the
// layout it replaced (16 blocks of one row unpacked into block lanes, which loaded a whole
// vector of activations per VPDPBUSD), one sequence 1.26x (medians of 3 interleaved rounds).
//
// AVX2 (no VNNI) takes 32 rows (four vectors of lanes) at a time and stages their transposed
// quants as signed q - 8 for 8 blocks at a time. The activations are kept as unsigned q + 128,
// so that a column's 4 quants broadcast once serve as VPMADDUBSW's unsigned operand against
// the 4 vectors of rows; 8 of them summed in 16 bits (8 x 2 x 255 x 8 < 2^15, exact), one
// VPMADDWD, the per-row correction -128 * sum(q - 8), one conversion and one FMA give 8 rows.
// One column alone (a decode of one sequence) is not worth the staging: 8 rows at a time keep
// their unsigned quants in registers against the column's signed quants broadcast and its
// correction, which gives the same exact dots and so the same bits.
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "backends/cpu/kernels/quantize_act.h"
#include "backends/cpu/kernels/row_lanes.h"
#include "backends/cpu/kernels/vec_dot_simd.h"

#if defined(TG_CPU_SIMD)

namespace tg::cpu::simd {
namespace {

constexpr int kQ4Offset = 8;  // Q4_0 quants are stored as q + 8.
constexpr size_t kRowAlign = 64;  // keeps every activation row 64-byte aligned.

// A block of activations: Q8_0 quants, the f32 scale, and the correction for unsigned weight
// nibbles (q + 8), -8 * sum of the quants.
struct ActQ4Block {
  float d;
  int32_t corr;  // -8 * sum(qs).
  int8_t qs[kQK8_0];
};
static_assert(sizeof(ActQ4Block) == 40);

#if !defined(TG_CPU_AVX512)
// AVX2 rows hold after their ActQ4Blocks (for one column against unsigned weight nibbles) the
// same quants offset to unsigned, for several columns against signed weights (RowGroups).
constexpr int kActOffset = 128;
struct ActQ4Unsigned {
  float d;
  uint8_t qs[kQK8_0];  // q + 128.
};
static_assert(sizeof(ActQ4Unsigned) == 36);
constexpr size_t kUnsignedBlockBytes = sizeof(ActQ4Unsigned);
#else
constexpr size_t kUnsignedBlockBytes = 0;
#endif

size_t ActRowBytes(int64_t k) {
  const int64_t nblocks = k / kQK4_0;
  const size_t bytes = static_cast<size_t>(nblocks) * (sizeof(ActQ4Block) + kUnsignedBlockBytes);
  return (bytes + kRowAlign - 1) / kRowAlign * kRowAlign;
}

void FromF32(const float* x, void* y, int64_t k) {
  const int64_t nblocks = k / kQK4_0;
  ActQ4Block* blocks = static_cast<ActQ4Block*>(y);
#if !defined(TG_CPU_AVX512)
  ActQ4Unsigned* unsigned_blocks = reinterpret_cast<ActQ4Unsigned*>(blocks + nblocks);
#endif
  for (int64_t i = 0; i < nblocks; ++i) {
    ActQ4Block& block = blocks[i];
    block.d = QuantizeBlockQ8_0(x + i * kQK4_0, block.qs);
    block.corr = -kQ4Offset * SumI8(block.qs, kQK8_0);
#if !defined(TG_CPU_AVX512)
    ActQ4Unsigned& u = unsigned_blocks[i];
    u.d = block.d;
    for (int j = 0; j < kQK8_0; ++j) u.qs[j] = static_cast<uint8_t>(block.qs[j] + kActOffset);
#endif
  }
}

#if defined(TG_CPU_AVX512)
// The scales of block `at` of the 16 rows at row[0..15], row r in lane r. Gathered in general
// registers: the vector pipes are what the tile runs out of.
inline __m512 RowScales(const char* const* row, size_t at) {
  uint64_t quarter[4] = {};
  for (int r = 0; r < kLaneRows; ++r) {
    uint16_t d;
    std::memcpy(&d, row[r] + at, sizeof(d));
    quarter[r / 4] |= uint64_t{d} << (16 * (r % 4));
  }
  return _mm512_cvtph_ps(
      _mm256_setr_epi64x(static_cast<int64_t>(quarter[0]), static_cast<int64_t>(quarter[1]),
                         static_cast<int64_t>(quarter[2]), static_cast<int64_t>(quarter[3])));
}

// Rows [0, rows) (rows <= 16) against C activation columns: c[j][r]. Block by block, the
// rows' quants are unpacked into registers once and met by every column; the `ahead` bytes
// from `next` (the following rows) are prefetched meanwhile (rows streamed side by side
// defeat the hardware prefetcher).
template <int C>
void Rows(int64_t nblocks, const char* a, size_t a_stride, int rows, const char* next, size_t ahead,
          const ActQ4Block* const* y, float* const* c) {
  const char* row[kLaneRows];
  TileRowPointers(a, a_stride, rows, row);
  const size_t ahead_step = PrefetchStep(ahead, nblocks);
  __m512 acc[C];
  for (int j = 0; j < C; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nblocks; ++i) {
    const size_t at = i * sizeof(BlockQ4_0);
    PrefetchShare<_MM_HINT_T1>(next, i, ahead_step);
    __m512i q[8];
    TransposeNibbles(row, at + offsetof(BlockQ4_0, qs), q);
    const __m512 dx = RowScales(row, at);
    for (int j = 0; j < C; ++j) {
      const ActQ4Block& yb = y[j][i];
      __m512i dot = _mm512_set1_epi32(yb.corr);
      for (int g = 0; g < 8; ++g) {
        dot = _mm512_dpbusd_epi32(dot, q[g], BroadcastQuad(yb.qs + 4 * g));
      }
      acc[j] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dx, _mm512_set1_ps(yb.d)), acc[j]);
    }
  }
  const __mmask16 keep = static_cast<__mmask16>((1u << rows) - 1);
  for (int j = 0; j < C; ++j) _mm512_mask_storeu_ps(c[j], keep, acc[j]);
}

// Rows<C> for C = 1..kMaxTileCols, at C - 1.
using RowsFn = void (*)(int64_t, const char*, size_t, int, const char*, size_t,
                        const ActQ4Block* const*, float* const*);
constexpr RowsFn kRowsForColumns[kMaxTileCols] = {Rows<1>, Rows<2>, Rows<3>, Rows<4>,
                                                  Rows<5>, Rows<6>, Rows<7>, Rows<8>};

// The AVX-512 tile entry: rows 16 at a time, every column of the call over each.
void Q4TileAvx512(int64_t k, const void* a, size_t a_stride, int rows, int ahead_rows,
                  const void* const* b, int cols, float* const* c) {
  const int64_t nblocks = k / kQK4_0;
  const ActQ4Block* y[kMaxTileCols];
  for (int j = 0; j < cols; ++j) y[j] = static_cast<const ActQ4Block*>(b[j]);
  ForEachRowGroup(a, a_stride, rows, ahead_rows, kLaneRows, [&](const RowGroup& g) {
    float* out[kMaxTileCols];
    for (int j = 0; j < cols; ++j) out[j] = c[j] + g.first;
    kRowsForColumns[cols - 1](nblocks, g.at, a_stride, g.rows, g.next, g.ahead, y, out);
  });
}
#endif

#if !defined(TG_CPU_AVX512)
constexpr int kMaxGroups = 4;  // vectors of rows per tile, sharing each column's broadcasts.
constexpr int kTileRows = kLaneRows * kMaxGroups;
constexpr int kStageBlocks = 8;  // blocks transposed at a time, then met by every column.

// One block of 8 weight rows, transposed for the columns: q[g] holds quants 4g .. 4g + 3 (g <
// 4: the low nibbles, else 16 + 4(g - 4) ..) of row r, as signed q - 8, in 32-bit lane r.
struct StagedRows {
  __m256i q[8];
  __m256i corr;  // -128 * sum(q - 8) per row: undoes the activations' offset.
  __m256 d;
};

// The scales of block `at` of the 8 rows at row[0..7], row r in lane r.
inline __m256 RowScales(const char* const* row, size_t at) {
  uint16_t d[kLaneRows];
  for (int r = 0; r < kLaneRows; ++r) std::memcpy(&d[r], row[r] + at, sizeof(uint16_t));
  return _mm256_cvtph_ps(_mm_setr_epi16(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]));
}

// Stages block `at` of the 8 rows at row[0..7] for RowGroups' columns.
inline void StageRows(const char* const* row, size_t at, StagedRows& out) {
  __m256i q[8];
  TransposeNibbles(row, at + offsetof(BlockQ4_0, qs), q);
  // Each row's 32 quants add up to at most 480: bytewise over 8 vectors (<= 120), then
  // widened; sum(q - 8) = sum(q) - 256.
  __m256i sum8 = q[0];
  for (int g = 1; g < 8; ++g) sum8 = _mm256_add_epi8(sum8, q[g]);
  const __m256i sum =
      _mm256_madd_epi16(_mm256_maddubs_epi16(sum8, _mm256_set1_epi8(1)), _mm256_set1_epi16(1));
  out.corr = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(kQ4Offset * kQK4_0), sum), 7);
  for (int g = 0; g < 8; ++g) out.q[g] = _mm256_sub_epi8(q[g], _mm256_set1_epi8(kQ4Offset));
  out.d = RowScales(row, at);
}

// Rows [0, rows) (rows <= 8) of `a` against one activation column: c[r]. Each block's quants
// stay unsigned in registers, against the column's signed quants and its correction (staging
// them as RowGroups does costs more than one column's products). The integer dots are exact,
// so the bits equal RowGroups'. Missing rows read the last one; `next` and `ahead` prefetch as
// in RowGroups.
void OneColumn(int64_t nblocks, const char* a, size_t a_stride, int rows, const char* next,
               size_t ahead, const ActQ4Block* y, float* c) {
  const char* row[kLaneRows];
  TileRowPointers(a, a_stride, rows, row);
  const size_t ahead_step = PrefetchStep(ahead, nblocks);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nblocks; ++i) {
    const size_t at = i * sizeof(BlockQ4_0);
    PrefetchShare<_MM_HINT_T0>(next, i, ahead_step);
    __m256i q[8];
    TransposeNibbles(row, at + offsetof(BlockQ4_0, qs), q);
    const ActQ4Block& yb = y[i];
    __m256i s16 = _mm256_maddubs_epi16(q[0], BroadcastQuad(yb.qs));
    for (int g = 1; g < 8; ++g) {
      s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(q[g], BroadcastQuad(yb.qs + 4 * g)));
    }
    const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(s16, ones), _mm256_set1_epi32(yb.corr));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                          _mm256_mul_ps(RowScales(row, at), _mm256_set1_ps(yb.d)), acc);
  }
  StoreLaneRows(acc, rows, c);
}

// Keeps the H running sums in registers between steps: without it GCC issues all of a
// column's 8 x H VPMADDUBSW first and spills their results (1.6x slower at 8 columns).
template <int H>
inline void KeepOrder(__m256i (&s)[H]) {
  if constexpr (H == 1) asm("" : "+x"(s[0]));
  if constexpr (H == 2) asm("" : "+x"(s[0]), "+x"(s[1]));
  if constexpr (H == 3) asm("" : "+x"(s[0]), "+x"(s[1]), "+x"(s[2]));
  if constexpr (H == 4) asm("" : "+x"(s[0]), "+x"(s[1]), "+x"(s[2]), "+x"(s[3]));
}

// Rows [0, rows) (rows <= 8 H) of `a` against `cols` activation columns: c[j][r]. While the
// blocks go by, the `ahead` bytes from `next` (the following rows) are prefetched.
template <int H>
void RowGroups(int64_t nblocks, const char* a, size_t a_stride, int rows, const char* next,
               size_t ahead, const ActQ4Unsigned* const* y, int cols, float* const* c) {
  const char* row[kLaneRows * H];
  TileRowPointers(a, a_stride, rows, row);
  const size_t ahead_step = PrefetchStep(ahead, nblocks);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[kMaxTileCols][H];
  for (int j = 0; j < cols; ++j) {
    for (int h = 0; h < H; ++h) acc[j][h] = _mm256_setzero_ps();
  }
  StagedRows stage[kStageBlocks][H];
  for (int64_t i0 = 0; i0 < nblocks; i0 += kStageBlocks) {
    const int n = static_cast<int>(std::min<int64_t>(kStageBlocks, nblocks - i0));
    for (int b = 0; b < n; ++b) {
      const int64_t i = i0 + b;
      // Into L2: the next 32 rows (36 KB for k = 2048) would evict the stage and the columns
      // from L1.
      PrefetchShare<_MM_HINT_T1>(next, i, ahead_step);
      for (int h = 0; h < H; ++h) {
        StageRows(row + kLaneRows * h, i * sizeof(BlockQ4_0), stage[b][h]);
      }
    }
    for (int j = 0; j < cols; ++j) {
      __m256 sums[H];
      for (int h = 0; h < H; ++h) sums[h] = acc[j][h];
      for (int b = 0; b < n; ++b) {
        const ActQ4Unsigned& yb = y[j][i0 + b];
        __m256i s[H];
        for (int h = 0; h < H; ++h) s[h] = _mm256_setzero_si256();
        for (int g = 0; g < 8; ++g) {
          const __m256i yq = BroadcastQuad(yb.qs + 4 * g);
          for (int h = 0; h < H; ++h) {
            s[h] = _mm256_add_epi16(s[h], _mm256_maddubs_epi16(yq, stage[b][h].q[g]));
          }
          KeepOrder(s);
        }
        const __m256 dy = _mm256_set1_ps(yb.d);
        for (int h = 0; h < H; ++h) {
          const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(s[h], ones), stage[b][h].corr);
          sums[h] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(stage[b][h].d, dy), sums[h]);
        }
      }
      for (int h = 0; h < H; ++h) acc[j][h] = sums[h];
    }
  }
  for (int j = 0; j < cols; ++j) {
    alignas(32) float out[kLaneRows * H];
    for (int h = 0; h < H; ++h) _mm256_store_ps(out + kLaneRows * h, acc[j][h]);
    std::memcpy(c[j], out, rows * sizeof(float));
  }
}

// The AVX2 tile entry: rows 32 at a time (the last up to 31 in as few vectors as they need),
// every column of the call (up to kMaxTileCols) over each staging of the weights.
void Q4TileAvx2(int64_t k, const void* a, size_t a_stride, int rows, int ahead_rows,
                const void* const* b, int cols, float* const* c) {
  const int64_t nblocks = k / kQK4_0;
  if (cols == 1) {
    const auto* y = static_cast<const ActQ4Block*>(b[0]);
    ForEachRowGroup(a, a_stride, rows, ahead_rows, kLaneRows, [&](const RowGroup& g) {
      OneColumn(nblocks, g.at, a_stride, g.rows, g.next, g.ahead, y, c[0] + g.first);
    });
    return;
  }
  const ActQ4Unsigned* y[kMaxTileCols];
  for (int j = 0; j < cols; ++j) {
    y[j] = reinterpret_cast<const ActQ4Unsigned*>(static_cast<const char*>(b[j]) +
                                                  nblocks * sizeof(ActQ4Block));
  }
  ForEachRowGroup(a, a_stride, rows, ahead_rows, kTileRows, [&](const RowGroup& g) {
    float* out[kMaxTileCols];
    for (int j = 0; j < cols; ++j) out[j] = c[j] + g.first;
    switch ((g.rows + kLaneRows - 1) / kLaneRows) {
      case 1:
        RowGroups<1>(nblocks, g.at, a_stride, g.rows, g.next, g.ahead, y, cols, out);
        break;
      case 2:
        RowGroups<2>(nblocks, g.at, a_stride, g.rows, g.next, g.ahead, y, cols, out);
        break;
      case 3:
        RowGroups<3>(nblocks, g.at, a_stride, g.rows, g.next, g.ahead, y, cols, out);
        break;
      default:
        RowGroups<4>(nblocks, g.at, a_stride, g.rows, g.next, g.ahead, y, cols, out);
        break;
    }
  });
}
#endif

}  // namespace

#if defined(TG_CPU_AVX512)
const DotKernels kDotQ4_0{FromF32, ActRowBytes, Q4TileAvx512, kLaneRows};
#else
const DotKernels kDotQ4_0{FromF32, ActRowBytes, Q4TileAvx2, kTileRows};
#endif

}  // namespace tg::cpu::simd

#endif  // TG_CPU_SIMD
