// AVX2 helpers for dot kernels that put one weight row in each 32-bit lane of a vector (the
// Q4_0 and MXFP4 tiles): 8 rows' 4-bit quants transposed 4 bytes at a time, so that a
// column's 4 activation quants broadcast once meet the same 4 quants of all 8 rows, and the
// prefetch of the rows that follow a tile. Stateless inline functions; thread-safe.
#ifndef TENSORGRID_BACKENDS_CPU_KERNELS_ROW_LANES_H_
#define TENSORGRID_BACKENDS_CPU_KERNELS_ROW_LANES_H_

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/vec_dot_simd.h"

#if defined(TG_CPU_SIMD) && !defined(TG_CPU_AVX512)

namespace tg::cpu::simd {

inline constexpr int kLaneRows = 8;  // weight rows per vector: one per 32-bit lane.
inline constexpr size_t kLine = 64;

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

// The weight rows of a tile: rows past `rows` read the last one (their lanes are dropped).
template <int N>
void TileRowPointers(const char* a, size_t a_stride, int rows, const char* (&row)[N]) {
  for (int r = 0; r < N; ++r) row[r] = a + std::min(r, rows - 1) * a_stride;
}

// Block i's even share (`step` bytes) of the following rows, fetched while the tile's own
// blocks go by (rows streamed side by side defeat the hardware prefetcher).
template <_mm_hint kHint>
inline void PrefetchShare(const char* next, int64_t i, size_t step) {
  for (size_t o = 0; o < step; o += kLine) _mm_prefetch(next + i * step + o, kHint);
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

}  // namespace tg::cpu::simd

#endif  // TG_CPU_SIMD && !TG_CPU_AVX512

#endif  // TENSORGRID_BACKENDS_CPU_KERNELS_ROW_LANES_H_
