// Reference ARGSORT, TOP_K and SUM_ROWS: the row orders by selection (repeatedly the best
// remaining index), independent of the CPU backend's sort, and row sums in double.
#include <cmath>
#include <vector>

#include "absl/strings/str_format.h"
#include "reference/reference_internal.h"
#include "reference/reference_ops.h"

namespace tg::ref::internal {
namespace {

// True when value a (index i) comes before value b (index j): by value, NaN after every
// number, then by index.
bool Before(double a, int64_t i, double b, int64_t j, bool descending) {
  if (std::isnan(a) != std::isnan(b)) return std::isnan(b);
  if (!std::isnan(a) && a != b) return descending ? a > b : a < b;
  return i < j;
}

// The first n indices of `row` in order, by selection sort.
std::vector<int64_t> FirstInOrder(const std::vector<double>& row, int64_t n, bool descending) {
  std::vector<bool> taken(row.size(), false);
  std::vector<int64_t> out;
  for (int64_t r = 0; r < n; ++r) {
    int64_t best = -1;
    for (int64_t i = 0; i < static_cast<int64_t>(row.size()); ++i) {
      if (taken[i]) continue;
      if (best < 0 || Before(row[i], i, row[best], best, descending)) best = i;
    }
    taken[best] = true;
    out.push_back(best);
  }
  return out;
}

absl::Status Order(Tensor* dst, const char* op_name, int64_t n, bool descending) {
  if (absl::Status s = CheckSources(*dst, op_name, 1); !s.ok()) return s;
  const Tensor& a = *dst->src[0];
  if (n < 1 || n > a.ne[0]) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %d of %d", op_name, n, a.ne[0]));
  }
  ForEachRow(*dst, [&](int64_t i1, int64_t i2, int64_t i3) {
    const std::vector<int64_t> order = FirstInOrder(ReadRowVector(a, i1, i2, i3), n, descending);
    const std::vector<double> values(order.begin(), order.end());
    WriteRow(dst, i1, i2, i3, values.data());
  });
  return absl::OkStatus();
}

}  // namespace

absl::Status Argsort(Tensor* dst) {
  return Order(dst, "ARGSORT", dst->ne[0], dst->op_params[0] == 1);
}

absl::Status TopK(Tensor* dst) { return Order(dst, "TOP_K", dst->op_params[0], true); }

absl::Status SumRows(Tensor* dst) {
  if (absl::Status s = CheckSources(*dst, "SUM_ROWS", 1); !s.ok()) return s;
  const Tensor& a = *dst->src[0];
  ForEachRow(*dst, [&](int64_t i1, int64_t i2, int64_t i3) {
    double sum = 0;
    for (double v : ReadRowVector(a, i1, i2, i3)) sum += v;
    WriteRow(dst, i1, i2, i3, &sum);
  });
  return absl::OkStatus();
}

}  // namespace tg::ref::internal
