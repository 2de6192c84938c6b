// GET_ROWS and SET_ROWS cases: every source/destination type, batched index layouts,
// broadcasting of SET_ROWS indices, odd row lengths and rows spaced apart in memory.
#include "core/ops.h"
#include "core/status_macros.h"
#include "tools/tg-ops/case_helpers.h"

namespace tg::ops_tool {
namespace {

constexpr DType kSetRowsTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,
                                   DType::kQ4_0, DType::kQ4_K, DType::kQ6_K};

// Row lengths that are odd where the type allows, and a few blocks otherwise.
int64_t RowLength(DType type) {
  if (!IsQuantized(type)) return 67;
  return BlockSize(type) == 32 ? 96 : 256;
}

// GET_ROWS from a[ne] (padded rows when `padded`) with idx[nr, ne2, ne3].
OpCase GetRowsCase(DType type, Shape4 ne, int64_t nr, bool padded = false) {
  return {Op::kGetRows, padded ? "a padded rows" : "", kNmseExact, [=](CaseBuilder& b) -> TensorOr {
            TensorOr a = padded ? PaddedRowsLeaf(b, type, ne) : b.Uniform(type, ne);
            if (!a.ok()) return a.status();
            TG_ASSIGN_OR_RETURN(Tensor * idx, b.Indices({nr, ne[2], ne[3]}, ne[1]));
            return GetRows(b.ctx(), *a, idx);
          }};
}

// SET_ROWS of b[ne0, nr, ne2, ne3] into a[ne] at idx[nr, c1, c2] (distinct per index row).
OpCase SetRowsCase(DType type, Shape4 ne, int64_t nr, int64_t c1, int64_t c2, bool padded = false) {
  // Writing F32 rows into a quantized destination quantizes them: the kernel's quantizer
  // may round a few values differently from the reference one.
  const double max_nmse = IsQuantized(type) ? kNmseQuantize : kNmseExact;
  return {Op::kSetRows, padded ? "rows padded" : "", max_nmse, [=](CaseBuilder& b) -> TensorOr {
            TG_ASSIGN_OR_RETURN(Tensor * a, b.Uniform(type, ne));
            const Shape4 rows_ne = {ne[0], nr, ne[2], ne[3]};
            TensorOr rows =
                padded ? PaddedRowsLeaf(b, DType::kF32, rows_ne) : b.Uniform(DType::kF32, rows_ne);
            if (!rows.ok()) return rows.status();
            TG_ASSIGN_OR_RETURN(Tensor * idx, b.DistinctIndices({nr, c1, c2}, ne[1]));
            return SetRows(b.ctx(), a, *rows, idx);
          }};
}

}  // namespace

void AddRowsCases(std::vector<OpCase>* cases) {
  constexpr int64_t kRows = 13;
  constexpr int64_t kPicked = 7;
  for (DType type : kWeightTypes) {
    cases->push_back(GetRowsCase(type, {RowLength(type), kRows, 1, 1}, kPicked));
  }
  cases->push_back(GetRowsCase(DType::kF32, {1, 9, 1, 1}, 4));
  cases->push_back(GetRowsCase(DType::kF16, {3, 9, 1, 1}, 5));
  cases->push_back(GetRowsCase(DType::kF32, {16, 9, 3, 2}, 4));
  cases->push_back(GetRowsCase(DType::kQ8_0, {32, 9, 2, 1}, 5));
  cases->push_back(GetRowsCase(DType::kQ4_0, {64, 10, 1, 1}, 6, true));
  cases->push_back(GetRowsCase(DType::kMXFP4, {64, 10, 1, 1}, 6, true));
  cases->push_back(GetRowsCase(DType::kF16, {67, 10, 1, 1}, 6, true));

  constexpr int64_t kDestRows = 16;
  constexpr int64_t kWritten = 5;
  for (DType type : kSetRowsTypes) {
    cases->push_back(SetRowsCase(type, {RowLength(type), kDestRows, 1, 1}, kWritten, 1, 1));
  }
  cases->push_back(SetRowsCase(DType::kF32, {1, 10, 1, 1}, 4, 1, 1));
  cases->push_back(SetRowsCase(DType::kF16, {3, 10, 1, 1}, 4, 1, 1));
  cases->push_back(SetRowsCase(DType::kF16, {32, 8, 2, 3}, 3, 1, 3));
  cases->push_back(SetRowsCase(DType::kQ8_0, {32, 8, 4, 1}, 2, 2, 1));
  cases->push_back(SetRowsCase(DType::kF32, {67, kDestRows, 1, 1}, kWritten, 1, 1, true));
  cases->push_back(SetRowsCase(DType::kQ4_0, {64, kDestRows, 1, 1}, kWritten, 1, 1, true));
}

}  // namespace tg::ops_tool
