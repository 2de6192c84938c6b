// Vectorized float math shared by the CPU kernels: exp (Cephes polynomial), silu, sums and
// row helpers. The vector type and its thin wrappers have an AVX-512 and an AVX2+FMA flavour;
// the math is written once over them. Callers keep a scalar fallback. Pure; thread-safe.
#ifndef TENSORGRID_BACKENDS_CPU_KERNELS_SIMD_MATH_H_
#define TENSORGRID_BACKENDS_CPU_KERNELS_SIMD_MATH_H_

#include <cmath>
#include <cstdint>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

// GCC 12's AVX-512 headers trigger false -W(maybe-)uninitialized reports in every function
// that inlines an intrinsic (GCC PR105593, fixed in 12.3/13). The pragma must be in effect
// where those functions are defined, so it cannot be popped at the end of this header.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12 && defined(__AVX512F__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#if defined(__AVX512F__)
#define TG_SIMD_AVX512 1
#define TG_SIMD 1
#elif defined(__AVX2__) && defined(__FMA__)
#define TG_SIMD_AVX2 1
#define TG_SIMD 1
#endif

namespace tg::cpu::simd {

// exp(x) = 2^n * exp(r), n = round(x / ln2), |r| <= ln2 / 2; ln2 split in two for an exact
// n * ln2_hi. Coefficients: Cephes expf (max relative error ~1.5e-7 on the reduced range).
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;
inline constexpr float kLn2Lo = -2.12194440e-4f;
inline constexpr float kExpC5 = 1.9875691500e-4f;
inline constexpr float kExpC4 = 1.3981999507e-3f;
inline constexpr float kExpC3 = 8.3334519073e-3f;
inline constexpr float kExpC2 = 4.1665795894e-2f;
inline constexpr float kExpC1 = 1.6666665459e-1f;
inline constexpr float kExpC0 = 5.0000001201e-1f;
// Beyond these, exp(x) is inf / rounds to +0; clamping keeps 2^n within two normal factors.
inline constexpr float kExpMaxArg = 89.0f;
inline constexpr float kExpMinArg = -104.0f;
// permute_ps control: lanes (1, 0, 3, 2) in each 128-bit group.
inline constexpr int kSwapPairs = 0xB1;

#if defined(TG_SIMD_AVX512)
// The widest float vector and its basic operations, so kernels write one vector loop.
using VecF = __m512;
inline constexpr int kLanes = 16;
inline VecF Load(const float* p) { return _mm512_loadu_ps(p); }
inline void Store(float* p, VecF v) { _mm512_storeu_ps(p, v); }
inline VecF Set1(float f) { return _mm512_set1_ps(f); }
inline VecF Add(VecF a, VecF b) { return _mm512_add_ps(a, b); }
inline VecF Sub(VecF a, VecF b) { return _mm512_sub_ps(a, b); }
inline VecF Mul(VecF a, VecF b) { return _mm512_mul_ps(a, b); }
inline VecF Div(VecF a, VecF b) { return _mm512_div_ps(a, b); }
inline VecF Max(VecF a, VecF b) { return _mm512_max_ps(a, b); }
inline VecF Fmadd(VecF a, VecF b, VecF c) { return _mm512_fmadd_ps(a, b, c); }

inline VecF Min(VecF a, VecF b) { return _mm512_min_ps(a, b); }
// (x1, x0, x3, x2, ...): each even/odd lane pair swapped.
inline VecF SwapPairs(VecF v) { return _mm512_permute_ps(v, kSwapPairs); }
inline VecF Fnmadd(VecF a, VecF b, VecF c) { return _mm512_fnmadd_ps(a, b, c); }
inline VecF RoundNearest(VecF x) {
  return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
// y * 2^n; scalef overflows to inf and underflows gradually as exp must.
inline VecF ScaleByPow2(VecF y, VecF n) { return _mm512_scalef_ps(y, n); }
// e where x is a number, x where it is NaN.
inline VecF KeepNaN(VecF e, VecF x) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), e, x);
}

inline float ReduceAdd(__m512 v) { return _mm512_reduce_add_ps(v); }
inline float ReduceMax(__m512 v) { return _mm512_reduce_max_ps(v); }

#elif defined(TG_SIMD_AVX2)
using VecF = __m256;
inline constexpr int kLanes = 8;
inline VecF Load(const float* p) { return _mm256_loadu_ps(p); }
inline void Store(float* p, VecF v) { _mm256_storeu_ps(p, v); }
inline VecF Set1(float f) { return _mm256_set1_ps(f); }
inline VecF Add(VecF a, VecF b) { return _mm256_add_ps(a, b); }
inline VecF Sub(VecF a, VecF b) { return _mm256_sub_ps(a, b); }
inline VecF Mul(VecF a, VecF b) { return _mm256_mul_ps(a, b); }
inline VecF Div(VecF a, VecF b) { return _mm256_div_ps(a, b); }
inline VecF Max(VecF a, VecF b) { return _mm256_max_ps(a, b); }
inline VecF Fmadd(VecF a, VecF b, VecF c) { return _mm256_fmadd_ps(a, b, c); }

inline VecF Min(VecF a, VecF b) { return _mm256_min_ps(a, b); }
inline VecF SwapPairs(VecF v) { return _mm256_permute_ps(v, kSwapPairs); }
inline VecF Fnmadd(VecF a, VecF b, VecF c) { return _mm256_fnmadd_ps(a, b, c); }
inline VecF RoundNearest(VecF x) {
  return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
// y * 2^n for n in [-150, 128] (what Exp's clamp leaves): 2^n as two normal factors
// 2^(n/2) * 2^(n - n/2) avoids exponent overflow in the bit construction while keeping inf /
// gradual underflow right.
inline VecF ScaleByPow2(VecF y, VecF n) {
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
}
// e where x is a number, x where it is NaN.
inline VecF KeepNaN(VecF e, VecF x) {
  return _mm256_blendv_ps(e, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

inline float ReduceAdd(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float ReduceMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

#if defined(TG_SIMD)
inline VecF Exp(VecF x) {
  const VecF xc = Max(Min(x, Set1(kExpMaxArg)), Set1(kExpMinArg));
  const VecF n = RoundNearest(Mul(xc, Set1(kLog2e)));
  VecF r = Fnmadd(n, Set1(kLn2Hi), xc);
  r = Fnmadd(n, Set1(kLn2Lo), r);
  VecF p = Set1(kExpC5);
  p = Fmadd(p, r, Set1(kExpC4));
  p = Fmadd(p, r, Set1(kExpC3));
  p = Fmadd(p, r, Set1(kExpC2));
  p = Fmadd(p, r, Set1(kExpC1));
  p = Fmadd(p, r, Set1(kExpC0));
  const VecF y = Add(Fmadd(p, Mul(r, r), r), Set1(1.0f));
  return KeepNaN(ScaleByPow2(y, n), x);
}

// x / (1 + exp(-x)).
inline VecF Silu(VecF x) { return Div(x, Add(Set1(1.0f), Exp(Sub(Set1(0.0f), x)))); }
#endif

inline float SiluScalar(float x) { return x / (1.0f + std::exp(-x)); }

// y[i] = exp(x[i]) for n floats with the vector Exp (scalar std::exp for the tail); y may
// equal x. Lets tests check the approximation and callers use it without SIMD types.
inline void ExpRow(const float* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(TG_SIMD)
  for (; i + kLanes <= n; i += kLanes) Store(y + i, Exp(Load(x + i)));
#endif
  for (; i < n; ++i) y[i] = std::exp(x[i]);
}

// y[i] *= a for n floats.
inline void ScaleRow(float* y, float a, int64_t n) {
  int64_t i = 0;
#if defined(TG_SIMD)
  const VecF va = Set1(a);
  for (; i + kLanes <= n; i += kLanes) Store(y + i, Mul(Load(y + i), va));
#endif
  for (; i < n; ++i) y[i] *= a;
}

// x[i] = exp(x[i] - m) for n floats; returns their sum (softmax's numerators and
// denominator). exp(-inf - m) is exactly 0.
inline float ExpShiftedRowSum(float* x, float m, int64_t n) {
  int64_t i = 0;
  float sum = 0.0f;
#if defined(TG_SIMD)
  const VecF vm = Set1(m);
  VecF acc = Set1(0.0f);
  for (; i + kLanes <= n; i += kLanes) {
    const VecF e = Exp(Sub(Load(x + i), vm));
    Store(x + i, e);
    acc = Add(acc, e);
  }
  sum = ReduceAdd(acc);
#endif
  for (; i < n; ++i) sum += x[i] = std::exp(x[i] - m);
  return sum;
}

}  // namespace tg::cpu::simd

#endif  // TENSORGRID_BACKENDS_CPU_KERNELS_SIMD_MATH_H_
