// Row reductions of the MoE router: ARGSORT and TOP_K (indices of each F32 row in value
// order: equal values keep index order, NaN last) and SUM_ROWS. Rows are split across threads;
// rows are short (one per token over the experts), so a sort of an index array per row is
// both simple and fast enough.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/row_walk.h"

namespace tg::cpu {
namespace {

float At(const float* row, size_t stride, int64_t i) {
  return *reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(row) + i * stride);
}

// A strict total order on indices of `x`: by value (descending or ascending), NaN after every
// number, then by index.
struct RowOrder {
  const float* x;
  size_t stride;
  bool descending;
  bool operator()(int32_t i, int32_t j) const {
    const float a = At(x, stride, i), b = At(x, stride, j);
    const bool a_nan = std::isnan(a), b_nan = std::isnan(b);
    if (a_nan || b_nan) return a_nan == b_nan ? i < j : b_nan;
    if (a != b) return descending ? a > b : a < b;
    return i < j;
  }
};

// Calls fn(order, out) for this thread's rows of dst, with `order` ready to sort row indices.
template <class Fn>
void ForEachSortedRow(const ComputeParams& p, Tensor* dst, bool descending, Fn fn) {
  const Tensor& a = *dst->src[0];
  std::vector<int32_t> idx(a.ne[0]);
  ForEachThreadRow(p, a.ne, [&](int64_t i1, int64_t i2, int64_t i3) {
    std::iota(idx.begin(), idx.end(), 0);
    const RowOrder order{RowPtr<const float>(a, i1, i2, i3), a.nb[0], descending};
    fn(order, idx, RowPtr<int32_t>(*dst, i1, i2, i3));
  });
}

}  // namespace

void ComputeArgsort(const ComputeParams& p, Tensor* dst) {
  const bool descending = dst->op_params[0] == 1;
  ForEachSortedRow(p, dst, descending,
                   [](const RowOrder& order, std::vector<int32_t>& idx, int32_t* out) {
                     std::sort(idx.begin(), idx.end(), order);
                     std::copy(idx.begin(), idx.end(), out);
                   });
}

void ComputeTopK(const ComputeParams& p, Tensor* dst) {
  const int64_t k = dst->op_params[0];
  ForEachSortedRow(p, dst, /*descending=*/true,
                   [k](const RowOrder& order, std::vector<int32_t>& idx, int32_t* out) {
                     std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), order);
                     std::copy(idx.begin(), idx.begin() + k, out);
                   });
}

// Summed in double: the rows are short, and the MoE weights' renormalisation divides by it.
void ComputeSumRows(const ComputeParams& p, Tensor* dst) {
  const Tensor& a = *dst->src[0];
  ForEachThreadRow(p, a.ne, [&](int64_t i1, int64_t i2, int64_t i3) {
    const float* x = RowPtr<const float>(a, i1, i2, i3);
    double sum = 0;
    for (int64_t i = 0; i < a.ne[0]; ++i) sum += At(x, a.nb[0], i);
    *RowPtr<float>(*dst, i1, i2, i3) = static_cast<float>(sum);
  });
}

}  // namespace tg::cpu
