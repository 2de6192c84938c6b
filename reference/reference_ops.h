// Naive f64 reference implementations of every op (docs/ops.md): the independent yardstick the
// optimized backends are checked against by the unit tests and by `tg-ops test`.
#ifndef TENSORGRID_REFERENCE_REFERENCE_OPS_H_
#define TENSORGRID_REFERENCE_REFERENCE_OPS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/tensor.h"

namespace tg::ref {

// Computes node `dst` from its sources, all in host memory (src[i]->data, dst->data valid),
// in double precision, writing dst's elements in dst's type through dst's ne/nb.
// View ops (VIEW/RESHAPE/PERMUTE/TRANSPOSE/NONE) do nothing. For CPY and SET_ROWS dst aliases
// the destination (src1 resp. src0) and the reference writes through dst's ne/nb.
// Returns INVALID_ARGUMENT for run-time errors (an index out of range), naming op and value;
// the offending slot is then handled as docs/ops.md prescribes (zeros, or a skipped row) and
// the rest of dst is still computed, so the output can be compared with a backend's.
// Returns UNIMPLEMENTED for an op/type/parameter combination it does not know.
absl::Status Compute(Tensor* dst);

// Reads element (i0,i1,i2,i3) of any tensor as double (dequantizing the containing block).
double ReadElement(const Tensor& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3);

// Reads row (i1,i2,i3) of any tensor, t.ne[0] values, as doubles into `out`.
void ReadRow(const Tensor& t, int64_t i1, int64_t i2, int64_t i3, double* out);

// Writes t->ne[0] values into row (i1,i2,i3) of t in t's type: each value is rounded to
// float first (F32 is the compute type every backend rounds through), then converted like
// QuantizeRow does (block by block for quantized types).
void WriteRow(Tensor* t, int64_t i1, int64_t i2, int64_t i3, const double* row);

// NMSE of `actual` against `expected` (sum (a-e)^2 / sum e^2; 0 when both are all zero),
// reading both through their ne/nb as doubles. Shapes must match (+inf otherwise, and when
// `expected` is all zero but `actual` is not). Equal values, infinities included, count as
// no error; a NaN on either side makes the result NaN.
double Nmse(const Tensor& actual, const Tensor& expected);

}  // namespace tg::ref

#endif  // TENSORGRID_REFERENCE_REFERENCE_OPS_H_
