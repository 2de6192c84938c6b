// ARGMAX: per F32 row, the index of the largest value (the first on ties; NaN never wins).
// Two passes over the row: the maximum with vector max (which keeps the running maximum when
// a lane is NaN), then the first position that equals it. Rows are split across threads.
#include <cstdint>
#include <limits>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/simd_math.h"  // the intrinsics (and GCC 12's warning fix).

namespace tg::cpu {
namespace {

float RowMax(const float* x, int64_t n) {
  int64_t i = 0;
  float m = -std::numeric_limits<float>::infinity();
#if defined(__AVX512F__)
  __m512 vm = _mm512_set1_ps(m);
  for (; i + 16 <= n; i += 16) vm = _mm512_max_ps(_mm512_loadu_ps(x + i), vm);  // NaN -> vm.
  m = _mm512_reduce_max_ps(vm);
#elif defined(__AVX2__)
  __m256 vm = _mm256_set1_ps(m);
  for (; i + 8 <= n; i += 8) vm = _mm256_max_ps(_mm256_loadu_ps(x + i), vm);  // NaN -> vm.
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vm);
  for (float v : lanes) m = v > m ? v : m;
#endif
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

int32_t FirstEqual(const float* x, int64_t n, float m) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 vm = _mm512_set1_ps(m);
  for (; i + 16 <= n; i += 16) {
    const __mmask16 eq = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), vm, _CMP_EQ_OQ);
    if (eq != 0) return static_cast<int32_t>(i + __builtin_ctz(eq));
  }
#elif defined(__AVX2__)
  const __m256 vm = _mm256_set1_ps(m);
  for (; i + 8 <= n; i += 8) {
    const int eq = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vm, _CMP_EQ_OQ));
    if (eq != 0) return static_cast<int32_t>(i + __builtin_ctz(eq));
  }
#endif
  for (; i < n; ++i) {
    if (x[i] == m) return static_cast<int32_t>(i);
  }
  return 0;  // every value is NaN.
}

}  // namespace

void ComputeArgmax(const ComputeParams& p, Tensor* dst) {
  const Tensor& a = *dst->src[0];
  const int64_t n0 = a.ne[0], n1 = a.ne[1], n2 = a.ne[2];
  int64_t begin, end;
  SplitRange(a.NumRows(), p.ith, p.nth, &begin, &end);
  for (int64_t r = begin; r < end; ++r) {
    const int64_t i1 = r % n1, i2 = (r / n1) % n2, i3 = r / (n1 * n2);
    const float* x = reinterpret_cast<const float*>(static_cast<const uint8_t*>(a.data) +
                                                    i1 * a.nb[1] + i2 * a.nb[2] + i3 * a.nb[3]);
    int32_t* out = reinterpret_cast<int32_t*>(static_cast<uint8_t*>(dst->data) + i1 * dst->nb[1] +
                                              i2 * dst->nb[2] + i3 * dst->nb[3]);
    *out = FirstEqual(x, n0, RowMax(x, n0));
  }
}

}  // namespace tg::cpu
