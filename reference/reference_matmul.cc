// Reference matrix products: MUL_MAT (with broadcast over dims 2, 3) and MUL_MAT_ID (MoE).
#include <cstdint>
#include <vector>

#include "absl/strings/str_format.h"
#include "reference/reference_internal.h"
#include "reference/reference_ops.h"

namespace tg::ref::internal {
namespace {

// out[m] = sum_k a[m][k] * x[k] for a row-major [M][K] matrix `a` (no pre-rounding of x).
void MatVec(const std::vector<double>& a, int64_t m_count, int64_t k_count, const double* x,
            double* out) {
  for (int64_t m = 0; m < m_count; ++m) {
    const double* a_row = a.data() + m * k_count;
    double sum = 0;
    for (int64_t k = 0; k < k_count; ++k) sum += a_row[k] * x[k];
    out[m] = sum;
  }
}

}  // namespace

absl::Status MulMat(Tensor* dst) {
  if (absl::Status s = CheckSources(*dst, "MUL_MAT", 2); !s.ok()) return s;
  const Tensor& a = *dst->src[0];
  const Tensor& b = *dst->src[1];
  if (a.ne[0] != b.ne[0] || b.ne[2] % a.ne[2] != 0 || b.ne[3] % a.ne[3] != 0) {
    return absl::InvalidArgumentError(absl::StrFormat("MUL_MAT: incompatible shapes %s x %s",
                                                      DescribeTensor(a), DescribeTensor(b)));
  }
  const int64_t k_count = a.ne[0];
  const int64_t m_count = a.ne[1];
  const int64_t r2 = b.ne[2] / a.ne[2];
  const int64_t r3 = b.ne[3] / a.ne[3];
  std::vector<double> a_mat;
  int64_t loaded2 = -1, loaded3 = -1;  // the a matrix in a_mat, read once per broadcast group.
  std::vector<double> b_row(k_count), out(m_count);
  for (int64_t j3 = 0; j3 < b.ne[3]; ++j3) {
    for (int64_t j2 = 0; j2 < b.ne[2]; ++j2) {
      if (j2 / r2 != loaded2 || j3 / r3 != loaded3) {
        loaded2 = j2 / r2;
        loaded3 = j3 / r3;
        a_mat = ReadMatrix(a, loaded2, loaded3);
      }
      for (int64_t n = 0; n < b.ne[1]; ++n) {
        ReadRow(b, n, j2, j3, b_row.data());
        MatVec(a_mat, m_count, k_count, b_row.data(), out.data());
        WriteRow(dst, n, j2, j3, out.data());
      }
    }
  }
  return absl::OkStatus();
}

absl::Status MulMatId(Tensor* dst) {
  if (absl::Status s = CheckSources(*dst, "MUL_MAT_ID", 3); !s.ok()) return s;
  const Tensor& as = *dst->src[0];
  const Tensor& b = *dst->src[1];
  const Tensor& ids = *dst->src[2];
  if (absl::Status s = CheckIndexType(ids, "MUL_MAT_ID"); !s.ok()) return s;
  const int64_t k_count = as.ne[0];
  const int64_t m_count = as.ne[1];
  const int64_t n_experts = as.ne[2];
  std::vector<std::vector<double>> experts(n_experts);  // read lazily, once each.
  std::vector<double> b_row(k_count), out(m_count);
  absl::Status status;
  // An expert range: src0 holds experts [first, first + count); other ids give zero rows.
  const int64_t first = dst->op_params[kMulMatIdFirstExpert];
  const bool ranged = dst->op_params[kMulMatIdExpertCount] > 0;
  for (int64_t t = 0; t < ids.ne[1]; ++t) {
    for (int64_t i = 0; i < ids.ne[0]; ++i) {
      const int64_t e = ReadIndex(ids, i, t, 0) - first;
      if (e < 0 || e >= n_experts) {
        if (!ranged) {
          status.Update(absl::InvalidArgumentError(absl::StrFormat(
              "MUL_MAT_ID: expert id %d out of range [0, %d) at (%d, %d)", e, n_experts, i, t)));
        }
        out.assign(m_count, 0.0);  // the slot is written as zeros.
        WriteRow(dst, i, t, 0, out.data());
        continue;
      }
      if (experts[e].empty()) experts[e] = ReadMatrix(as, e, 0);
      ReadRow(b, i % b.ne[1], t, 0, b_row.data());
      MatVec(experts[e], m_count, k_count, b_row.data(), out.data());
      WriteRow(dst, i, t, 0, out.data());
    }
  }
  return status;
}

}  // namespace tg::ref::internal
