// Vectorized activation quantizers, value-exact with the reference quantizers: the scale is
// computed with the same f32 operations, every element is multiplied by the same inverse
// scale, and rounding reproduces roundf (Q8_0: halves away from zero) and nearest_int
// (Q8_K: halves to even, which is what cvtps2dq does in the default rounding mode).
#include "backends/cpu/kernels/quantize_act.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "backends/cpu/kernels/vec_dot.h"
#include "core/fp16.h"
#include "core/quant_blocks.h"

#if defined(TG_CPU_AVX2) || defined(TG_CPU_AVX512)
#include <immintrin.h>
#endif

namespace tg::cpu {
namespace {

constexpr float kQ8Max = 127.0f;

#if defined(TG_CPU_AVX512)
// roundf for 16 lanes: truncate, then step away from zero when the dropped part is >= 1/2
// (x - trunc(x) is exact, so this matches roundf for every float).
inline __m512i RoundHalfAwayToInt(__m512 v) {
  const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 frac = _mm512_abs_ps(_mm512_sub_ps(v, t));
  const __mmask16 up = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512 one = _mm512_castsi512_ps(
      _mm512_ternarylogic_epi32(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN),
                                _mm512_castps_si512(_mm512_set1_ps(1.0f)),
                                0xEA));  // (v & sign) | 1.0f = copysign(1, v).
  return _mm512_cvttps_epi32(_mm512_mask_add_ps(t, up, t, one));
}
#elif defined(TG_CPU_AVX2)
inline __m256i RoundHalfAwayToInt(__m256 v) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
  const __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 one = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0f));
  return _mm256_cvttps_epi32(_mm256_add_ps(t, _mm256_and_ps(up, one)));
}
inline float HorizontalMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}
// Packs 8 int32 lanes (already in [-127, 127]) to 8 int8.
inline void StoreInt8x8(__m256i v, int8_t* out) {
  const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packs_epi16(w, w));
}
#endif

}  // namespace

float QuantizeBlockQ8_0(const float* x, int8_t* qs) {
#if defined(TG_CPU_AVX512)
  const __m512 v0 = _mm512_loadu_ps(x);
  const __m512 v1 = _mm512_loadu_ps(x + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
  const float d = amax / kQ8Max;
  const __m512 id = _mm512_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qs),
                   _mm512_cvtsepi32_epi8(RoundHalfAwayToInt(_mm512_mul_ps(v0, id))));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16),
                   _mm512_cvtsepi32_epi8(RoundHalfAwayToInt(_mm512_mul_ps(v1, id))));
  return HalfToFloat(FloatToHalf(d));
#elif defined(TG_CPU_AVX2)
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
  }
  const float d = HorizontalMax(m) / kQ8Max;
  const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
  for (int i = 0; i < 4; ++i) StoreInt8x8(RoundHalfAwayToInt(_mm256_mul_ps(v[i], id)), qs + 8 * i);
  return HalfToFloat(FloatToHalf(d));
#else
  float amax = 0.0f;
  for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / kQ8Max;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < kQK8_0; ++j) qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  return HalfToFloat(FloatToHalf(d));
#endif
}

float QuantizeBlockQ8_K(const float* x, int8_t* qs) {
  // The sign of the scale comes from the first element of largest magnitude, as in ggml.
  float amax = 0.0f;
#if defined(TG_CPU_AVX512)
  __m512 m = _mm512_setzero_ps();
  for (int i = 0; i < kQK_K; i += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
  amax = _mm512_reduce_max_ps(m);
#else
  for (int j = 0; j < kQK_K; ++j) amax = std::max(amax, std::fabs(x[j]));
#endif
  if (amax == 0.0f) {
    std::fill(qs, qs + kQK_K, 0);
    return 0.0f;
  }
  int first = 0;
  while (std::fabs(x[first]) != amax) ++first;
  const float iscale = -kQ8Max / x[first];
#if defined(TG_CPU_AVX512)
  const __m512 vs = _mm512_set1_ps(iscale);
  const __m512i kMaxQ = _mm512_set1_epi32(127);
  for (int i = 0; i < kQK_K; i += 16) {
    const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + i), vs));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + i),
                     _mm512_cvtsepi32_epi8(_mm512_min_epi32(q, kMaxQ)));
  }
#elif defined(TG_CPU_AVX2)
  const __m256 vs = _mm256_set1_ps(iscale);
  const __m256i kMaxQ = _mm256_set1_epi32(127);
  for (int i = 0; i < kQK_K; i += 8) {
    const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
    StoreInt8x8(_mm256_min_epi32(q, kMaxQ), qs + i);
  }
#else
  for (int j = 0; j < kQK_K; ++j) {
    // nearest_int of ggml: round half to even through the 1.5 * 2^23 magic constant.
    const float v = iscale * x[j];
    qs[j] = static_cast<int8_t>(std::min(127.0f, std::nearbyint(v)));
  }
#endif
  return 1.0f / iscale;
}

}  // namespace tg::cpu
