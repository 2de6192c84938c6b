// Helpers shared by the reference op implementations (tests/reference/*.cc), and the per-op
// entry points Compute() dispatches to. Not part of the reference's public API.
#ifndef TENSORGRID_REFERENCE_REFERENCE_INTERNAL_H_
#define TENSORGRID_REFERENCE_REFERENCE_INTERNAL_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/tensor.h"

namespace tg::ref::internal {

// Calls fn(i1, i2, i3) for every row of a tensor of shape `t`, in logical order.
template <typename Fn>
void ForEachRow(const Tensor& t, Fn&& fn) {
  for (int64_t i3 = 0; i3 < t.ne[3]; ++i3) {
    for (int64_t i2 = 0; i2 < t.ne[2]; ++i2) {
      for (int64_t i1 = 0; i1 < t.ne[1]; ++i1) fn(i1, i2, i3);
    }
  }
}

// Row (i1,i2,i3) of t as a fresh vector of t.ne[0] doubles.
std::vector<double> ReadRowVector(const Tensor& t, int64_t i1, int64_t i2, int64_t i3);

// Reads rows 0..ne[1]-1 of the matrix (i2,i3) of t into a row-major [ne[1]][ne[0]] vector.
std::vector<double> ReadMatrix(const Tensor& t, int64_t i2, int64_t i3);

// Writes one element of a tensor whose type has block size 1 (rounded through float).
void WriteElement(Tensor* t, int64_t i0, int64_t i1, int64_t i2, int64_t i3, double v);

// Element (i0,i1,i2) of an I32 index tensor.
int32_t ReadIndex(const Tensor& t, int64_t i0, int64_t i1, int64_t i2);

// softmax over x in place; -inf entries get 0, and an all -inf (or empty) x becomes zeros.
void SoftmaxInPlace(std::vector<double>* x);

// Returns an error if a required source is missing or an index source is not I32, so that
// malformed nodes fail cleanly instead of crashing the test run.
absl::Status CheckSources(const Tensor& dst, const char* op_name, int num_required);
absl::Status CheckIndexType(const Tensor& idx, const char* op_name);

// Per-op implementations (dst->op selects the one Compute() calls).
absl::Status Argmax(Tensor* dst);
absl::Status GetRows(Tensor* dst);
absl::Status SetRows(Tensor* dst);
absl::Status Copy(Tensor* dst);      // CPY and CONT.
absl::Status AddOrMul(Tensor* dst);  // ADD, MUL and DIV.
absl::Status Argsort(Tensor* dst);
absl::Status TopK(Tensor* dst);
absl::Status SumRows(Tensor* dst);
absl::Status Scale(Tensor* dst);
absl::Status RmsNorm(Tensor* dst);
absl::Status Silu(Tensor* dst);
absl::Status Swiglu(Tensor* dst);
absl::Status SwigluOai(Tensor* dst);
absl::Status MulMat(Tensor* dst);
absl::Status MulMatId(Tensor* dst);
absl::Status Rope(Tensor* dst);
absl::Status SoftMax(Tensor* dst);
absl::Status FlashAttn(Tensor* dst);
absl::Status Sample(Tensor* dst);

// SAMPLE's generator (docs/ops.md): Philox4x32-10 of a counter and a key, and the uniform
// number in [0, 1) it makes for a row at `position`.
std::array<uint32_t, 4> Philox4x32_10(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key);
double SampleUniform(uint64_t seed, int32_t position);

}  // namespace tg::ref::internal

#endif  // TENSORGRID_REFERENCE_REFERENCE_INTERNAL_H_
