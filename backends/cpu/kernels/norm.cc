// RMS_NORM: dst = a / sqrt(mean(a^2) + eps) per row, with the sum of squares in double.
#include <cmath>
#include <cstdint>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/row_walk.h"
#include "backends/cpu/kernels/simd_math.h"

namespace tg::cpu {
namespace {

// Sum of x[i]^2 accumulated in double: exact products, so long rows of large and small
// values keep full f32 accuracy in the mean.
double SumOfSquares(const float* x, int64_t n) {
  int64_t i = 0;
  double sum = 0.0;
#if defined(TG_SIMD_AVX512)
  __m512d acc_lo = _mm512_setzero_pd(), acc_hi = _mm512_setzero_pd();
  for (; i + 16 <= n; i += 16) {
    const __m512d lo = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
    const __m512d hi = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8));
    acc_lo = _mm512_fmadd_pd(lo, lo, acc_lo);
    acc_hi = _mm512_fmadd_pd(hi, hi, acc_hi);
  }
  sum = _mm512_reduce_add_pd(_mm512_add_pd(acc_lo, acc_hi));
#elif defined(TG_SIMD_AVX2)
  __m256d acc_lo = _mm256_setzero_pd(), acc_hi = _mm256_setzero_pd();
  for (; i + 8 <= n; i += 8) {
    const __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
    const __m256d hi = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
    acc_lo = _mm256_fmadd_pd(lo, lo, acc_lo);
    acc_hi = _mm256_fmadd_pd(hi, hi, acc_hi);
  }
  const __m256d acc = _mm256_add_pd(acc_lo, acc_hi);
  const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(acc), _mm256_extractf128_pd(acc, 1));
  sum = _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
#endif
  for (; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

void ScaleRow(float* d, const float* x, int64_t n, float scale) {
  int64_t i = 0;
#if defined(TG_SIMD)
  const simd::VecF vs = simd::Set1(scale);
  for (; i + simd::kLanes <= n; i += simd::kLanes) {
    simd::Store(d + i, simd::Mul(simd::Load(x + i), vs));
  }
#endif
  for (; i < n; ++i) d[i] = x[i] * scale;
}

}  // namespace

void ComputeRmsNorm(const ComputeParams& p, Tensor* dst) {
  const Tensor& a = *dst->src[0];
  const double eps = dst->ParamF32(0);
  const int64_t n0 = a.ne[0];
  ForEachThreadRow(p, a.ne, [&](int64_t i1, int64_t i2, int64_t i3) {
    const float* x = RowPtr<const float>(a, i1, i2, i3);
    float* d = RowPtr<float>(*dst, i1, i2, i3);
    if (a.nb[0] != sizeof(float)) {  // strided source: gather into dst, normalize in place.
      for (int64_t i = 0; i < n0; ++i) {
        d[i] = *reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(x) + i * a.nb[0]);
      }
      x = d;
    }
    const double mean = SumOfSquares(x, n0) / static_cast<double>(n0);
    ScaleRow(d, x, n0, static_cast<float>(1.0 / std::sqrt(mean + eps)));
  });
}

}  // namespace tg::cpu
