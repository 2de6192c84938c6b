// Internal to the dot kernels: the SIMD kernel sets (one file per weight type) and the
// activation layouts and helpers they share. Only included by vec_dot*.cc.
#ifndef TENSORGRID_BACKENDS_CPU_KERNELS_VEC_DOT_SIMD_H_
#define TENSORGRID_BACKENDS_CPU_KERNELS_VEC_DOT_SIMD_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "backends/cpu/kernels/vec_dot.h"
#include "core/quant_blocks.h"

#if defined(TG_CPU_AVX2) || defined(TG_CPU_AVX512)
#include <immintrin.h>
#define TG_CPU_SIMD 1
#endif

namespace tg::cpu::simd {

#if defined(TG_CPU_SIMD)
extern const DotKernels kDotF32;
extern const DotKernels kDotF16;
extern const DotKernels kDotBF16;
extern const DotKernels kDotQ8_0;
extern const DotKernels kDotQ4_0;
extern const DotKernels kDotQ4_K;
extern const DotKernels kDotQ6_K;
extern const DotKernels kDotQ5_0;
extern const DotKernels kDotQ5_1;
extern const DotKernels kDotIQ4_NL;
extern const DotKernels kDotMXFP4;
extern const DotKernels kDotQ5_K;
extern const DotKernels kDotQ3_K;
extern const DotKernels kDotQ2_K;
extern const DotKernels kDotIQ4_XS;
#endif

// A tile kernel for a fixed number of rows (1 to 4), given k.
using RowsFn = void (*)(int64_t k, const char* a, size_t a_stride, const void* const* b, int cols,
                        float* const* c);

// Runs a tile of any number of rows as groups of at most 4 (what the quantized kernels
// keep in registers); kRows[r - 1] handles r rows.
inline void TileInGroupsOf4(const RowsFn (&kRows)[4], int64_t k, const void* a, size_t a_stride,
                            int rows, const void* const* b, int cols, float* const* c) {
  const char* base = static_cast<const char*>(a);
  for (int r0 = 0; r0 < rows; r0 += 4) {
    float* shifted[kMaxTileCols];
    for (int j = 0; j < cols; ++j) shifted[j] = c[j] + r0;
    const int n = rows - r0 < 4 ? rows - r0 : 4;
    kRows[n - 1](k, base + r0 * a_stride, a_stride, b, cols, shifted);
  }
}

// Calls fn(std::integral_constant<int, n>{}) for n in 1 .. sizeof...(I).
template <class Fn, int... I>
void WithColumnCount(Fn&& fn, int n, std::integer_sequence<int, I...>) {
  ((n == I + 1 ? (fn(std::integral_constant<int, I + 1>{}), 0) : 0), ...);
}

// Calls fn(std::integral_constant<int, C>{}, j) for the activation columns j .. j + C - 1, in
// passes of kColsPerPass (<= kMaxTileCols) columns and one shorter pass at the end: a kernel
// templated on its column count C keeps C columns' accumulators in registers.
template <int kColsPerPass, class Fn>
void ByColumnPasses(int cols, Fn&& fn) {
  static_assert(kColsPerPass >= 1 && kColsPerPass <= kMaxTileCols);
  for (int j = 0; j < cols; j += kColsPerPass) {
    const int n = cols - j < kColsPerPass ? cols - j : kColsPerPass;
    WithColumnCount([&](auto c) { fn(c, j); }, n, std::make_integer_sequence<int, kColsPerPass>{});
  }
}

// Columns per pass of a quantized kernel for register tiles of 1, 2, 3 and 4 rows: what
// keeps R x C accumulators (and the kernel's per-column temporaries) in registers. One row
// with many columns (a decode of several sequences) unpacks each weight block once for up to
// kMaxTileCols columns.
struct ColumnPasses {
  int cols[4];
};

// The tile entry of a quantized kernel set: rows in groups of at most 4, columns in passes of
// kPasses.cols[R - 1]. Kernel is a stateless callable (a captureless lambda) run as
// Kernel{}(rows, cols, k, a, a_stride, b, c) for one register tile, rows and cols being
// std::integral_constant<int, R> and <int, C>, so that it can instantiate its R x C kernel.
// Each column's arithmetic is the same whatever the other columns (batch invariance).
template <int kColsPerPass, class Kernel, int R>
void QuantTileRows(int64_t k, const char* a, size_t a_stride, const void* const* b, int cols,
                   float* const* c) {
  ByColumnPasses<kColsPerPass>(cols, [&](auto n, int j) {
    Kernel{}(std::integral_constant<int, R>{}, n, k, a, a_stride, b + j, c + j);
  });
}

template <ColumnPasses kPasses, class Kernel>
void QuantTileByRows(int64_t k, const void* a, size_t a_stride, int rows, int /*ahead_rows*/,
                     const void* const* b, int cols, float* const* c) {
  static constexpr RowsFn kRows[4] = {
      QuantTileRows<kPasses.cols[0], Kernel, 1>, QuantTileRows<kPasses.cols[1], Kernel, 2>,
      QuantTileRows<kPasses.cols[2], Kernel, 3>, QuantTileRows<kPasses.cols[3], Kernel, 4>};
  TileInGroupsOf4(kRows, k, a, a_stride, rows, b, cols, c);
}

// QuantTileByRows with the same kColsPerPass for every row count.
template <int kColsPerPass, class Kernel>
void QuantTile(int64_t k, const void* a, size_t a_stride, int rows, int ahead_rows,
               const void* const* b, int cols, float* const* c) {
  QuantTileByRows<ColumnPasses{{kColsPerPass, kColsPerPass, kColsPerPass, kColsPerPass}}, Kernel>(
      k, a, a_stride, rows, ahead_rows, b, cols, c);
}

// The activation rows of a tile's C columns (b as the tile kernels receive it) as Act*.
template <class Act, int C>
std::array<const Act*, C> ActColumns(const void* const* b) {
  std::array<const Act*, C> y;
  for (int j = 0; j < C; ++j) y[j] = static_cast<const Act*>(b[j]);
  return y;
}

// A 32-element block of Q8_0-quantized activations with its scale already widened to f32
// (the dot kernels would otherwise convert it once per weight row).
struct ActQ8_0 {
  float d;
  int8_t qs[kQK8_0];
};
static_assert(sizeof(ActQ8_0) == 36);

#if defined(TG_CPU_SIMD)
// Decode reads each weight row once, one row after another (streaming_rows 1), and the
// hardware prefetcher starts over at every 4 KiB page: one-row tiles prefetch this far ahead of
// the block they read (AVX2 EPYC, 2 threads, tg-bench decode: a 1.1 GB Q8_0 llama 8-16% faster,
// a 230 MiB Q8_0 qwen3moe 15-23%).
inline constexpr size_t kStreamPrefetchBytes = 1024;

// Prefetches kBytes (a weight block's size) kStreamPrefetchBytes past `block`.
template <size_t kBytes>
inline void PrefetchStreamAhead(const void* block) {
  const char* p = static_cast<const char*>(block) + kStreamPrefetchBytes;
  for (size_t o = 0; o < kBytes; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
}

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Sum of the products of 32 signed bytes, as 8 int32 lanes (VNNI when there is one).
inline __m256i DotI8Lanes(__m256i x, __m256i y) {
  // u8 x s8 products need an unsigned left side: move x's sign onto y.
  const __m256i ax = _mm256_sign_epi8(x, x);
  const __m256i sy = _mm256_sign_epi8(y, x);
#if defined(TG_CPU_AVX512)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, sy);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
#endif
}

// Sum of the products of unsigned bytes u and signed bytes s, as 8 int32 lanes added to init
// (without VNNI the pairwise int16 sums saturate: u below 128 keeps them exact).
inline __m256i DotU8I8Lanes(__m256i init, __m256i u, __m256i s) {
#if defined(TG_CPU_AVX512)
  return _mm256_dpbusd_epi32(init, u, s);
#else
  return _mm256_add_epi32(init,
                          _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

// Sum of n (16 or 32) signed bytes: psadbw adds unsigned bytes, so bias them by 128.
inline int SumI8(const int8_t* q, int n) {
  constexpr int kBias = 128;
  const __m128i bias = _mm_set1_epi8(static_cast<char>(kBias));
  __m128i s =
      _mm_sad_epu8(_mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)), bias),
                   _mm_setzero_si128());
  if (n == 32) {
    s = _mm_add_epi64(
        s,
        _mm_sad_epu8(_mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16)), bias),
                     _mm_setzero_si128()));
  }
  s = _mm_add_epi64(s, _mm_unpackhi_epi64(s, s));
  return _mm_cvtsi128_si32(s) - kBias * n;
}

// The 8 six-bit scales and the 8 six-bit mins of a Q4_K / Q5_K super-block as bytes (ggml's
// bit juggling of get_scale_min_k4, 4 sub-blocks per 32-bit word).
inline void UnpackScalesK4(const uint8_t* packed, uint64_t* scales, uint64_t* mins) {
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  uint32_t u[3];
  std::memcpy(u, packed, sizeof(u));
  const uint32_t sc_lo = u[0] & kLow6;
  const uint32_t sc_hi = (u[2] & kLow4) | (((u[0] >> 6) & kLow2) << 4);
  const uint32_t mn_lo = u[1] & kLow6;
  const uint32_t mn_hi = ((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kLow2) << 4);
  *scales = sc_lo | (uint64_t{sc_hi} << 32);
  *mins = mn_lo | (uint64_t{mn_hi} << 32);
}

// The table of 16 levels (plus `add`) in both 128-bit lanes, for a nibble lookup with pshufb.
inline __m256i LevelTable(const int8_t* levels, int add) {
  alignas(16) int8_t t[16];
  for (int i = 0; i < 16; ++i) t[i] = static_cast<int8_t>(levels[i] + add);
  return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
}

// 32 nibbles of 16 bytes as 32 bytes: low nibbles first, then high nibbles (Q4_0's order).
inline __m256i NibblesToBytes(const uint8_t* q) {
  // One load into both lanes, the upper lane shifted by 4 (one variable shift).
  const __m256i both =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
  const __m256i shifted = _mm256_srlv_epi32(both, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
  return _mm256_and_si256(shifted, _mm256_set1_epi8(0x0F));
}
#endif

}  // namespace tg::cpu::simd

#endif  // TENSORGRID_BACKENDS_CPU_KERNELS_VEC_DOT_SIMD_H_
