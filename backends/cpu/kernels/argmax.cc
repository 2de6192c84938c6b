// ARGMAX: per F32 row, the index of the largest value (the first on ties; NaN never wins).
// Two passes over the row: the maximum with vector max (which keeps the running maximum when
// a lane is NaN), then the first position that equals it. Rows are split across threads.
#include <cstdint>
#include <limits>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/row_walk.h"
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
  const int64_t n0 = a.ne[0];
  ForEachThreadRow(p, a.ne, [&](int64_t i1, int64_t i2, int64_t i3) {
    const float* x = RowPtr<const float>(a, i1, i2, i3);
    *RowPtr<int32_t>(*dst, i1, i2, i3) = FirstEqual(x, n0, RowMax(x, n0));
  });
}

}  // namespace tg::cpu
