// TensorView: what a CUDA kernel knows of a tensor (its address, type, shape and byte strides),
// passed by value to kernels, and the index math on it. Every kernel reads and writes through
// ne/nb, so permuted, transposed and strided views work without a copy. Plain data; the
// functions are pure.
#ifndef TENSORGRID_BACKENDS_CUDA_TENSOR_VIEW_H_
#define TENSORGRID_BACKENDS_CUDA_TENSOR_VIEW_H_

#include <cstdint>

#include "backends/cuda/host_device.h"

namespace tg::cuda {

struct TensorView {
  char* data = nullptr;
  int type = 0;                  // a tg::DType value.
  int64_t ne[4] = {1, 1, 1, 1};  // elements per dimension, innermost first.
  int64_t nb[4] = {0, 0, 0, 0};  // byte strides.
};

TG_HD int64_t NumElements(const TensorView& v) { return v.ne[0] * v.ne[1] * v.ne[2] * v.ne[3]; }
TG_HD int64_t NumRows(const TensorView& v) { return v.ne[1] * v.ne[2] * v.ne[3]; }

// Splits a logical element index k (dim 0 fastest) into coordinates i[0..3] of shape ne.
TG_HD void Unravel(int64_t k, const int64_t ne[4], int64_t i[4]) {
  i[0] = k % ne[0];
  k /= ne[0];
  i[1] = k % ne[1];
  k /= ne[1];
  i[2] = k % ne[2];
  i[3] = k / ne[2];
}

// Byte offset of element (i0, i1, i2, i3); for block-quantized types i0 must be 0 (a row).
TG_HD int64_t Offset(const TensorView& v, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return i0 * v.nb[0] + i1 * v.nb[1] + i2 * v.nb[2] + i3 * v.nb[3];
}

// Indices (i1, i2, i3) of row r (rows numbered dim 1 fastest, then 2, then 3).
struct RowIndex {
  int64_t i1, i2, i3;
};
TG_HD RowIndex RowOf(const TensorView& v, int64_t r) {
  return {r % v.ne[1], (r / v.ne[1]) % v.ne[2], r / (v.ne[1] * v.ne[2])};
}

// Address of row r.
TG_HD char* RowPtr(const TensorView& v, int64_t r) {
  const auto [i1, i2, i3] = RowOf(v, r);
  return v.data + Offset(v, 0, i1, i2, i3);
}

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_TENSOR_VIEW_H_
