// SIMD dot kernels for F32, F16 and BF16 weights against f32 activations. F16/BF16 are
// widened to f32 on load (F16C / a 16-bit shift), so activations keep full precision and
// matrix-vector products stay bound by the weight stream, not by conversions.
#include <cstring>

#include "backends/cpu/kernels/vec_dot_simd.h"

#if defined(TG_CPU_SIMD)

namespace tg::cpu::simd {
namespace {

size_t F32RowBytes(int64_t k) { return static_cast<size_t>(k) * sizeof(float); }

// Keeps v in a register: GCC otherwise folds the activation load into every FMA that uses
// it, and loads (not FMAs) are the bottleneck of these kernels.
template <typename V>
inline void InRegister(V& v) {
  asm("" : "+v"(v));
}

// 8 weights, and weight i, of each type as f32: the AVX2 loads and the AVX-512 kernels' short
// rows both use them.
inline __m256 F32x8(const void* p) { return _mm256_loadu_ps(static_cast<const float*>(p)); }
inline __m256 F16x8(const void* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p)));
}
inline __m256 BF16x8(const void* p) {
  const __m128i h = _mm_loadu_si128(static_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline float F32At(const void* p, int64_t i) { return static_cast<const float*>(p)[i]; }
inline float F16At(const void* p, int64_t i) {
  return _cvtsh_ss(static_cast<const uint16_t*>(p)[i]);
}
inline float BF16At(const void* p, int64_t i) {
  uint32_t u = static_cast<uint32_t>(static_cast<const uint16_t*>(p)[i]) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

#if defined(TG_CPU_AVX512)
constexpr int kLanes = 16;
using VecF = __m512;

struct LoadF32 {
  static constexpr size_t kBytes = 4;
  static VecF Load(const void* p) { return _mm512_loadu_ps(p); }
  static VecF LoadPartial(const void* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
  static __m256 Load8(const void* p) { return F32x8(p); }
  static float Scalar(const void* p, int64_t i) { return F32At(p, i); }
};
struct LoadF16 {
  static constexpr size_t kBytes = 2;
  static VecF Load(const void* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
  }
  static VecF LoadPartial(const void* p, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
  }
  static __m256 Load8(const void* p) { return F16x8(p); }
  static float Scalar(const void* p, int64_t i) { return F16At(p, i); }
};
struct LoadBF16 {
  static constexpr size_t kBytes = 2;
  static VecF Widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static VecF Load(const void* p) {
    return Widen(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
  }
  static VecF LoadPartial(const void* p, __mmask16 m) {
    return Widen(_mm256_maskz_loadu_epi16(m, p));
  }
  static __m256 Load8(const void* p) { return BF16x8(p); }
  static float Scalar(const void* p, int64_t i) { return BF16At(p, i); }
};

inline VecF LoadF(const float* p) { return _mm512_loadu_ps(p); }
inline VecF FmaddF(VecF a, VecF b, VecF c) { return _mm512_fmadd_ps(a, b, c); }

// The last k - i (< kLanes) elements through masked loads, then the sums into c.
template <typename L, int R, int C>
void FinishTile(int64_t k, int64_t i, const char* a, size_t a_stride, const float* const* y,
                VecF (&acc)[R][C], float* const* c) {
  if (i < k) {
    const __mmask16 m = static_cast<__mmask16>((1u << (k - i)) - 1);
    VecF bv[C];
    for (int j = 0; j < C; ++j) bv[j] = _mm512_maskz_loadu_ps(m, y[j] + i);
    for (int r = 0; r < R; ++r) {
      const VecF av = L::LoadPartial(a + r * a_stride + i * L::kBytes, m);
      for (int j = 0; j < C; ++j) acc[r][j] = _mm512_fmadd_ps(av, bv[j], acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) c[j][r] = _mm512_reduce_add_ps(acc[r][j]);
  }
}

// Accumulators (rows x columns) must fit the 32 zmm registers with room for the loads.
constexpr int ColsPerPass(int rows) { return rows <= 4 ? 4 : 2; }

#else  // AVX2
constexpr int kLanes = 8;
using VecF = __m256;

struct LoadF32 {
  static constexpr size_t kBytes = 4;
  static VecF Load(const void* p) { return F32x8(p); }
  static VecF Load8(const void* p) { return F32x8(p); }
  static float Scalar(const void* p, int64_t i) { return F32At(p, i); }
};
struct LoadF16 {
  static constexpr size_t kBytes = 2;
  static VecF Load(const void* p) { return F16x8(p); }
  static VecF Load8(const void* p) { return F16x8(p); }
  static float Scalar(const void* p, int64_t i) { return F16At(p, i); }
};
struct LoadBF16 {
  static constexpr size_t kBytes = 2;
  static VecF Load(const void* p) { return BF16x8(p); }
  static VecF Load8(const void* p) { return BF16x8(p); }
  static float Scalar(const void* p, int64_t i) { return BF16At(p, i); }
};

inline VecF LoadF(const float* p) { return _mm256_loadu_ps(p); }
inline VecF FmaddF(VecF a, VecF b, VecF c) { return _mm256_fmadd_ps(a, b, c); }

// The sums into c, with the last k - i (< kLanes) elements added one by one.
template <typename L, int R, int C>
void FinishTile(int64_t k, int64_t i, const char* a, size_t a_stride, const float* const* y,
                VecF (&acc)[R][C], float* const* c) {
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) {
      float sum = HorizontalSum(acc[r][j]);
      for (int64_t t = i; t < k; ++t) sum += L::Scalar(a + r * a_stride, t) * y[j][t];
      c[j][r] = sum;
    }
  }
}

// 16 ymm registers: 4 rows x 2 columns (or 8 x 1) of accumulators plus the loads.
constexpr int ColsPerPass(int rows) { return rows <= 4 ? 2 : 1; }
#endif

// R weight rows x C activation rows; each loaded vector feeds R (or C) FMAs.
template <typename L, int R, int C>
void FloatTile(int64_t k, const char* a, size_t a_stride, const void* const* b, float* const* c) {
  VecF acc[R][C] = {};
  const auto y = ActColumns<float, C>(b);
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    VecF bv[C];
    for (int j = 0; j < C; ++j) {
      bv[j] = LoadF(y[j] + i);
      InRegister(bv[j]);
    }
    for (int r = 0; r < R; ++r) {
      const VecF av = L::Load(a + r * a_stride + i * L::kBytes);
      for (int j = 0; j < C; ++j) acc[r][j] = FmaddF(av, bv[j], acc[r][j]);
    }
  }
  FinishTile<L, R, C>(k, i, a, a_stride, y.data(), acc, c);
}

template <typename L, int R>
void FloatTileRows(int64_t k, const char* a, size_t a_stride, const void* const* b, int cols,
                   float* const* c) {
  constexpr int kCols = ColsPerPass(R);
  for (int j = 0; j < cols; j += kCols) {
    switch (cols - j < kCols ? cols - j : kCols) {
      case 1:
        FloatTile<L, R, 1>(k, a, a_stride, b + j, c + j);
        break;
      case 2:
        FloatTile<L, R, (kCols >= 2 ? 2 : 1)>(k, a, a_stride, b + j, c + j);
        break;
      case 3:
        FloatTile<L, R, (kCols >= 3 ? 3 : 1)>(k, a, a_stride, b + j, c + j);
        break;
      default:
        FloatTile<L, R, (kCols >= 4 ? 4 : 1)>(k, a, a_stride, b + j, c + j);
        break;
    }
  }
}

// One weight row against C activation rows, four independent accumulators per column: the
// matrix-vector path for short rows, where walking the rows one after the other keeps each
// thread on a single sequential stream. Each column's sums run in the same order whatever C
// is, so a column's result has the same bits batched as alone (batch invariance). 256-bit
// loads on AVX-512 too: GGUF aligns tensor data to 32 bytes only, and 64-byte loads that
// straddle cache lines measured 5-20% slower on the stories15M F32 decode (ymm 773-825 t/s,
// zmm 625-804, same run).
template <typename L, int C>
void RowDot(int64_t k, const char* a, const void* const* b, float* const* c, int r) {
  constexpr int kAcc = 4, kW = 8;
  const auto y = ActColumns<float, C>(b);
  __m256 acc[C][kAcc];
  for (int j = 0; j < C; ++j) {
    for (int u = 0; u < kAcc; ++u) acc[j][u] = _mm256_setzero_ps();
  }
  int64_t i = 0;
  for (; i + kAcc * kW <= k; i += kAcc * kW) {
    for (int u = 0; u < kAcc; ++u) {
      const __m256 av = L::Load8(a + (i + u * kW) * L::kBytes);
      for (int j = 0; j < C; ++j) {
        acc[j][u] = _mm256_fmadd_ps(av, _mm256_loadu_ps(y[j] + i + u * kW), acc[j][u]);
      }
    }
  }
  for (; i + kW <= k; i += kW) {
    const __m256 av = L::Load8(a + i * L::kBytes);
    for (int j = 0; j < C; ++j) {
      acc[j][0] = _mm256_fmadd_ps(av, _mm256_loadu_ps(y[j] + i), acc[j][0]);
    }
  }
  for (int j = 0; j < C; ++j) {
    float sum = HorizontalSum(
        _mm256_add_ps(_mm256_add_ps(acc[j][0], acc[j][1]), _mm256_add_ps(acc[j][2], acc[j][3])));
    for (int64_t t = i; t < k; ++t) sum += L::Scalar(a, t) * y[j][t];
    c[j][r] = sum;
  }
}

// Columns per RowDot pass: C x 4 accumulators plus the loads fit the ymm registers (32 with
// AVX-512, 16 with AVX2).
#if defined(TG_CPU_AVX512)
constexpr int kRowDotCols = 4;
#else
constexpr int kRowDotCols = 2;
#endif

// Up to this row length a tile takes its rows one at a time (RowDot, for 1 column or
// several): the activation rows (<= 8 KiB each) stay in L1 anyway, and one sequential stream
// per thread measured 1.3-1.6x the throughput of 8 interleaved rows on the 288-wide
// stories15M shape (rows of 1152 bytes, 2 threads, Zen 4). Longer rows share each
// activation load between kMaxTileRows rows.
constexpr int64_t kRowwiseMaxK = 2048;

template <typename L>
void Tile(int64_t k, const void* a, size_t a_stride, int rows, int /*ahead_rows*/,
          const void* const* b, int cols, float* const* c) {
  if (k <= kRowwiseMaxK) {
    using RowFn = void (*)(int64_t, const char*, const void* const*, float* const*, int);
    static constexpr RowFn kCols[4] = {RowDot<L, 1>, RowDot<L, 2>, RowDot<L, 3>, RowDot<L, 4>};
    for (int r = 0; r < rows; ++r) {
      const char* row = static_cast<const char*>(a) + r * a_stride;
      for (int j = 0; j < cols; j += kRowDotCols) {
        const int n = cols - j < kRowDotCols ? cols - j : kRowDotCols;
        kCols[n - 1](k, row, b + j, c + j, r);
      }
    }
    return;
  }
  using Fn = void (*)(int64_t, const char*, size_t, const void* const*, int, float* const*);
  static constexpr Fn kRows[kMaxTileRows] = {
      FloatTileRows<L, 1>, FloatTileRows<L, 2>, FloatTileRows<L, 3>, FloatTileRows<L, 4>,
      FloatTileRows<L, 5>, FloatTileRows<L, 6>, FloatTileRows<L, 7>, FloatTileRows<L, 8>};
  for (int r0 = 0; r0 < rows; r0 += kMaxTileRows) {
    float* shifted[kMaxTileCols];
    for (int j = 0; j < cols; ++j) shifted[j] = c[j] + r0;
    const int n = rows - r0 < kMaxTileRows ? rows - r0 : kMaxTileRows;
    kRows[n - 1](k, static_cast<const char*>(a) + r0 * a_stride, a_stride, b, cols, shifted);
  }
}

}  // namespace

// Float rows are long (an f32 activation row of 8192 is all of L1), so matrix-vector tiles
// take kMaxTileRows weight rows to share each activation load (8 rows measured 5-10% above
// 4 from DRAM on Zen 4, 2 rows 15% below).
const DotKernels kDotF32{nullptr, F32RowBytes, Tile<LoadF32>, kMaxTileRows};
const DotKernels kDotF16{nullptr, F32RowBytes, Tile<LoadF16>, kMaxTileRows};
const DotKernels kDotBF16{nullptr, F32RowBytes, Tile<LoadBF16>, kMaxTileRows};

}  // namespace tg::cpu::simd

#endif  // TG_CPU_SIMD
