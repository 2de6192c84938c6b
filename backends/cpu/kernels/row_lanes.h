// Helpers for dot kernels that put one weight row in each 32-bit lane of a vector (the Q4_0
// tiles, AVX2's MXFP4 tile): the rows' 4-bit quants transposed 4 bytes at a time (8 rows on
// AVX2, 16 on AVX-512), so that a column's 4 activation quants broadcast once meet the same 4
// quants of all the rows, and the prefetch of the rows that follow a tile. Stateless inline
// functions; thread-safe.
#ifndef TENSORGRID_BACKENDS_CPU_KERNELS_ROW_LANES_H_
#define TENSORGRID_BACKENDS_CPU_KERNELS_ROW_LANES_H_

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/vec_dot_simd.h"

#if defined(TG_CPU_SIMD)

namespace tg::cpu::simd {

inline constexpr size_t kLine = 64;

#if defined(TG_CPU_AVX512)
inline constexpr int kLaneRows = 16;  // weight rows per vector: one per 32-bit lane.

// The 16 nibble bytes at row[r] + at of the 16 rows row[0..15], transposed: q[g] holds nibbles
// 4g .. 4g + 3 (g < 4: the low nibbles, elements 4g ..; else the high ones, elements
// 16 + 4(g - 4) ..) of row r, as bytes 0..15, in 32-bit lane r.
inline void TransposeNibbles(const char* const* row, size_t at, __m512i (&q)[8]) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  // Row 4L + p's bytes in 128-bit lane L of load p, then 4-byte groups transposed per lane.
  const auto load = [&](int r) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(row[r] + at));
  };
  __m512i v[4];
  for (int p = 0; p < 4; ++p) {
    v[p] = _mm512_inserti32x4(
        _mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(load(p)), load(4 + p), 1),
                           load(8 + p), 2),
        load(12 + p), 3);
  }
  const __m512i u0 = _mm512_unpacklo_epi32(v[0], v[1]), u1 = _mm512_unpackhi_epi32(v[0], v[1]);
  const __m512i u2 = _mm512_unpacklo_epi32(v[2], v[3]), u3 = _mm512_unpackhi_epi32(v[2], v[3]);
  const __m512i t[4] = {_mm512_unpacklo_epi64(u0, u2), _mm512_unpackhi_epi64(u0, u2),
                        _mm512_unpacklo_epi64(u1, u3), _mm512_unpackhi_epi64(u1, u3)};
  for (int g = 0; g < 4; ++g) {
    q[g] = _mm512_and_si512(t[g], low4);
    q[g + 4] = _mm512_and_si512(_mm512_srli_epi16(t[g], 4), low4);
  }
}

// 4 activation quants at p in every 32-bit lane.
inline __m512i BroadcastQuad(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi32(v);
}
#else
inline constexpr int kLaneRows = 8;  // weight rows per vector: one per 32-bit lane.

// The 16 nibble bytes at row[r] + at of the 8 rows row[0..7], transposed: q[g] holds nibbles
// 4g .. 4g + 3 (g < 4: the low nibbles, elements 4g ..; else the high ones, elements
// 16 + 4(g - 4) ..) of row r, as bytes 0..15, in 32-bit lane r.
inline void TransposeNibbles(const char* const* row, size_t at, __m256i (&q)[8]) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  // Row r's bytes in 128-bit half r / 4 of load r % 4, then 4-byte groups transposed.
  __m256i v[4];
  for (int r = 0; r < 4; ++r) {
    v[r] = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(row[r + 4] + at),
                               reinterpret_cast<const __m128i*>(row[r] + at));
  }
  const __m256i u0 = _mm256_unpacklo_epi32(v[0], v[1]), u1 = _mm256_unpackhi_epi32(v[0], v[1]);
  const __m256i u2 = _mm256_unpacklo_epi32(v[2], v[3]), u3 = _mm256_unpackhi_epi32(v[2], v[3]);
  const __m256i t[4] = {_mm256_unpacklo_epi64(u0, u2), _mm256_unpackhi_epi64(u0, u2),
                        _mm256_unpacklo_epi64(u1, u3), _mm256_unpackhi_epi64(u1, u3)};
  for (int g = 0; g < 4; ++g) {
    q[g] = _mm256_and_si256(t[g], low4);
    q[g + 4] = _mm256_and_si256(_mm256_srli_epi16(t[g], 4), low4);
  }
}

// 4 activation quants at p in every 32-bit lane.
inline __m256i BroadcastQuad(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm256_set1_epi32(v);
}

// The 8 lanes of a tile's sums as rows [0, rows) of c.
inline void StoreLaneRows(__m256 sums, int rows, float* c) {
  alignas(32) float out[kLaneRows];
  _mm256_store_ps(out, sums);
  std::memcpy(c, out, rows * sizeof(float));
}
#endif

// The weight rows of a tile: rows past `rows` read the last one (their lanes are dropped).
template <int N>
void TileRowPointers(const char* a, size_t a_stride, int rows, const char* (&row)[N]) {
  for (int r = 0; r < N; ++r) row[r] = a + std::min(r, rows - 1) * a_stride;
}

// One group of a tile's rows, and the next group's bytes to prefetch while it is computed.
struct RowGroup {
  int first;          // the group's first row,
  int rows;           // its rows (the last group may have fewer),
  const char* at;     // where the first starts;
  const char* next;   // the next group's first row,
  size_t ahead;       // and its bytes (0 after the last group).
};

// Calls fn(RowGroup) for rows [0, rows) of `a`, `group` rows at a time; the last group
// prefetches up to `group` of the ahead_rows that follow (DotTileFn's).
template <typename Fn>
void ForEachRowGroup(const void* a, size_t a_stride, int rows, int ahead_rows, int group, Fn fn) {
  const char* base = static_cast<const char*>(a);
  for (int r0 = 0; r0 < rows; r0 += group) {
    const char* at = base + r0 * a_stride;
    const int n = std::min(group, rows - r0);
    fn(RowGroup{r0, n, at, at + n * a_stride,
                std::clamp(rows + ahead_rows - r0 - n, 0, group) * a_stride});
  }
}

// The share of `ahead` bytes each of a tile's nblocks blocks prefetches (PrefetchShare's step).
inline size_t PrefetchStep(size_t ahead, int64_t nblocks) {
  return nblocks > 0 ? (ahead + nblocks - 1) / nblocks : 0;
}

// Block i's even share (`step` bytes) of the following rows, fetched while the tile's own
// blocks go by (rows streamed side by side defeat the hardware prefetcher).
template <_mm_hint kHint>
inline void PrefetchShare(const char* next, int64_t i, size_t step) {
  for (size_t o = 0; o < step; o += kLine) _mm_prefetch(next + i * step + o, kHint);
}

}  // namespace tg::cpu::simd

#endif  // TG_CPU_SIMD

#endif  // TENSORGRID_BACKENDS_CPU_KERNELS_ROW_LANES_H_
