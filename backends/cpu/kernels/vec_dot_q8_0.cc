// SIMD dot kernels for Q8_0 weights against Q8_0-quantized activations (ActQ8_0 blocks: the
// reference quants with the scale pre-widened to f32). One 32-byte vector per block: the
// weight row is read once per tile and every loaded block meets all the tile's columns.
// (Unsigned weights, x + 128, against a per-lane offset carried by the activations save the
// sign fix-up per column, but the extra activation load per block and column measured slower
// on Zen 4: 8 columns 405-419 against 359-363 ns per 2048-wide row.)
#include "backends/cpu/kernels/quantize_act.h"
#include "backends/cpu/kernels/vec_dot_simd.h"

#if defined(TG_CPU_SIMD)

namespace tg::cpu::simd {
namespace {

size_t ActRowBytes(int64_t k) { return static_cast<size_t>(k / kQK8_0) * sizeof(ActQ8_0); }

void FromF32(const float* x, void* y, int64_t k) {
  ActQ8_0* out = static_cast<ActQ8_0*>(y);
  for (int64_t i = 0; i < k / kQK8_0; ++i) out[i].d = QuantizeBlockQ8_0(x + i * kQK8_0, out[i].qs);
}

template <int R, int C>
void Q8Tile(int64_t nblocks, const char* a, size_t a_stride, const void* const* b,
            float* const* c) {
  __m256 acc[R][C] = {};
  const auto y = ActColumns<ActQ8_0, C>(b);
  for (int64_t i = 0; i < nblocks; ++i) {
    if constexpr (R == 1) PrefetchStreamAhead<sizeof(BlockQ8_0)>(a + i * sizeof(BlockQ8_0));
    for (int r = 0; r < R; ++r) {
      const BlockQ8_0* x = reinterpret_cast<const BlockQ8_0*>(a + r * a_stride) + i;
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x->qs));
      const __m256 dx = _mm256_set1_ps(_cvtsh_ss(x->d));
      for (int j = 0; j < C; ++j) {
        const __m256i yq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[j][i].qs));
        const __m256 p = _mm256_cvtepi32_ps(DotI8Lanes(xq, yq));
        acc[r][j] = _mm256_fmadd_ps(p, _mm256_mul_ps(dx, _mm256_set1_ps(y[j][i].d)), acc[r][j]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) c[j][r] = HorizontalSum(acc[r][j]);
  }
}

// Columns per pass for 1..4 rows: R x C accumulators plus C activation blocks in registers.
// AVX-512 (32 registers): one row (decode streams weight rows one at a time) takes 8 columns
// per pass over its blocks. AVX2 (16 ymm registers): 4 x 2 accumulators, or one row's 4 columns.
#if defined(TG_CPU_AVX512)
constexpr ColumnPasses kPasses{{8, 4, 4, 4}};
#else
constexpr ColumnPasses kPasses{{4, 2, 2, 2}};
#endif

// One register tile for QuantTile.
constexpr auto kQ8Tile = [](auto rows, auto cols, int64_t k, const char* a, size_t a_stride,
                            const void* const* b, float* const* c) {
  Q8Tile<decltype(rows)::value, decltype(cols)::value>(k / kQK8_0, a, a_stride, b, c);
};

}  // namespace

const DotKernels kDotQ8_0{FromF32, ActRowBytes, QuantTileByRows<kPasses, decltype(kQ8Tile)>, 1};

}  // namespace tg::cpu::simd

#endif  // TG_CPU_SIMD
