// Row addressing for the row-wise CPU kernels: the address of row (i1, i2, i3) of a tensor,
// and the walk over one thread's share of a tensor's rows.
#ifndef TENSORGRID_BACKENDS_CPU_KERNELS_ROW_WALK_H_
#define TENSORGRID_BACKENDS_CPU_KERNELS_ROW_WALK_H_

#include <cstdint>

#include "backends/cpu/compute_params.h"
#include "core/tensor.h"

namespace tg::cpu {

// Row (i1, i2, i3) of t, as T (const T for reading).
template <class T>
T* RowPtr(const Tensor& t, int64_t i1, int64_t i2, int64_t i3) {
  return reinterpret_cast<T*>(static_cast<uint8_t*>(t.data) + i1 * t.nb[1] + i2 * t.nb[2] +
                              i3 * t.nb[3]);
}

// Calls fn(i1, i2, i3) for this thread's contiguous share of the rows of a tensor shaped ne.
template <class Fn>
void ForEachThreadRow(const ComputeParams& p, const int64_t (&ne)[kMaxDims], Fn&& fn) {
  const int64_t n1 = ne[1], n2 = ne[2];
  int64_t begin, end;
  SplitRange(n1 * n2 * ne[3], p.ith, p.nth, &begin, &end);
  for (int64_t r = begin; r < end; ++r) fn(r % n1, (r / n1) % n2, r / (n1 * n2));
}

}  // namespace tg::cpu

#endif  // TENSORGRID_BACKENDS_CPU_KERNELS_ROW_WALK_H_
