// Reference data-movement ops: GET_ROWS, SET_ROWS, CPY and CONT.
#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "reference/reference_internal.h"
#include "reference/reference_ops.h"

namespace tg::ref::internal {
namespace {

// Splits a flat logical index (dim 0 fastest) into the coordinates of shape `t`.
void Unflatten(const Tensor& t, int64_t k, int64_t idx[kMaxDims]) {
  for (int d = 0; d < kMaxDims; ++d) {
    idx[d] = k % t.ne[d];
    k /= t.ne[d];
  }
}

// Copies the raw blocks of one row: converting a value to its own type is the identity, and
// requantizing dequantized blocks would not reproduce them bit for bit.
void CopyRawRow(const Tensor& a, const int64_t ai[kMaxDims], Tensor* dst,
                const int64_t di[kMaxDims]) {
  const auto* src =
      static_cast<const uint8_t*>(a.data) + ai[1] * a.nb[1] + ai[2] * a.nb[2] + ai[3] * a.nb[3];
  auto* out = static_cast<uint8_t*>(dst->data) + di[1] * dst->nb[1] + di[2] * dst->nb[2] +
              di[3] * dst->nb[3];
  const size_t block_bytes = BlockBytes(a.type);
  for (int64_t b = 0; b < a.ne[0] / BlockSize(a.type); ++b) {
    std::memmove(out + b * dst->nb[0], src + b * a.nb[0], block_bytes);
  }
}

// Rows of a map in order onto rows of dst (both have the same ne[0]).
void CopyRows(const Tensor& a, Tensor* dst) {
  std::vector<double> row(a.ne[0]);
  int64_t r = 0;
  ForEachRow(a, [&](int64_t i1, int64_t i2, int64_t i3) {
    int64_t di[kMaxDims];
    Unflatten(*dst, r++ * dst->ne[0], di);
    if (a.type == dst->type) {
      const int64_t ai[kMaxDims] = {0, i1, i2, i3};
      CopyRawRow(a, ai, dst, di);
      return;
    }
    ReadRow(a, i1, i2, i3, row.data());
    WriteRow(dst, di[1], di[2], di[3], row.data());
  });
}

// Element k of a goes to element k of dst (neither is quantized).
void CopyElements(const Tensor& a, Tensor* dst) {
  std::vector<double> row(a.ne[0]);
  int64_t k = 0;
  ForEachRow(a, [&](int64_t i1, int64_t i2, int64_t i3) {
    ReadRow(a, i1, i2, i3, row.data());
    for (double v : row) {
      int64_t di[kMaxDims];
      Unflatten(*dst, k++, di);
      WriteElement(dst, di[0], di[1], di[2], di[3], v);
    }
  });
}

}  // namespace

absl::Status GetRows(Tensor* dst) {
  if (absl::Status s = CheckSources(*dst, "GET_ROWS", 2); !s.ok()) return s;
  const Tensor& a = *dst->src[0];
  const Tensor& idx = *dst->src[1];
  if (absl::Status s = CheckIndexType(idx, "GET_ROWS"); !s.ok()) return s;
  absl::Status status;
  std::vector<double> row(dst->ne[0]);
  ForEachRow(*dst, [&](int64_t i, int64_t j2, int64_t j3) {
    const int32_t r = ReadIndex(idx, i, j2, j3);
    if (r < 0 || r >= a.ne[1]) {
      std::fill(row.begin(), row.end(), 0.0);  // as the kernels do: zeros, and an error.
      status.Update(absl::InvalidArgumentError(absl::StrFormat(
          "GET_ROWS: index %d out of range [0, %d) at (%d, %d, %d)", r, a.ne[1], i, j2, j3)));
    } else {
      ReadRow(a, r, j2, j3, row.data());
    }
    WriteRow(dst, i, j2, j3, row.data());
  });
  return status;
}

absl::Status SetRows(Tensor* dst) {
  if (absl::Status s = CheckSources(*dst, "SET_ROWS", 3); !s.ok()) return s;
  const Tensor& b = *dst->src[1];
  const Tensor& idx = *dst->src[2];
  if (absl::Status s = CheckIndexType(idx, "SET_ROWS"); !s.ok()) return s;
  absl::Status status;
  std::vector<double> row(b.ne[0]);
  ForEachRow(b, [&](int64_t i, int64_t j2, int64_t j3) {
    const int32_t r = ReadIndex(idx, i, j2 % idx.ne[1], j3 % idx.ne[2]);
    if (r < 0 || r >= dst->ne[1]) {
      status.Update(absl::InvalidArgumentError(absl::StrFormat(
          "SET_ROWS: index %d out of range [0, %d) at (%d, %d, %d)", r, dst->ne[1], i, j2, j3)));
      return;  // the row is skipped.
    }
    ReadRow(b, i, j2, j3, row.data());
    WriteRow(dst, r, j2, j3, row.data());
  });
  return status;
}

absl::Status Copy(Tensor* dst) {
  const char* op_name = dst->op == Op::kCpy ? "CPY" : "CONT";
  if (absl::Status s = CheckSources(*dst, op_name, 1); !s.ok()) return s;
  const Tensor& a = *dst->src[0];
  if (a.NumElements() != dst->NumElements()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %d elements into %d", op_name, a.NumElements(), dst->NumElements()));
  }
  if (a.ne[0] == dst->ne[0]) {
    CopyRows(a, dst);
    return absl::OkStatus();
  }
  if (IsQuantized(a.type) || IsQuantized(dst->type)) {
    return absl::UnimplementedError(
        absl::StrFormat("%s: %s -> %s with different row lengths %d and %d", op_name,
                        DTypeName(a.type), DTypeName(dst->type), a.ne[0], dst->ne[0]));
  }
  CopyElements(a, dst);
  return absl::OkStatus();
}

}  // namespace tg::ref::internal
