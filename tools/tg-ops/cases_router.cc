// Cases of the MoE router's ops: ARGSORT (both orders), TOP_K, SUM_ROWS and DIV, on
// contiguous and strided rows, with ties (equal values keep index order), -inf and NaN
// entries (NaN last), rows longer than a GPU workgroup sorts at once (1024: the Vulkan kernel
// then selects the k largest first), and special divisors.
#include <string>

#include "absl/strings/str_cat.h"
#include "core/enum_names.h"
#include "core/ops.h"
#include "core/status_macros.h"
#include "tools/tg-ops/case_helpers.h"

namespace tg::ops_tool {
namespace {

// Index outputs must match exactly: any other index is a wrong pick.
constexpr double kExactIds = 0.0;

// How a case's F32 rows are made.
enum class Rows { kUniform, kTransposed, kAllEqual, kSomeInf, kSomeNan, kFewValues };

constexpr EnumName<Rows> kRowsNotes[] = {
    {Rows::kTransposed, "transposed"},
    {Rows::kAllEqual, "all values equal"},
    {Rows::kSomeInf, "-inf entries, one all -inf row"},
    {Rows::kSomeNan, "NaN entries, one all NaN row"},
    {Rows::kFewValues, "64 distinct values: ties"},
};

const char* RowsNote(Rows rows) { return NameOf(kRowsNotes, rows, ""); }

TensorOr RowsOperand(CaseBuilder& b, Shape4 ne, Rows rows) {
  constexpr double kInfShare = 0.5;
  constexpr double kNanShare = 0.3;
  // f16 has 64 values in [1, 1 + 1/16).
  constexpr float kFewLo = 1.0f, kFewHi = 1.0625f;
  switch (rows) {
    case Rows::kTransposed:
      return TransposedLeaf(b, DType::kF32, ne);
    case Rows::kAllEqual: {
      TG_ASSIGN_OR_RETURN(Tensor * x, b.Uniform(DType::kF32, ne));
      return Scale(b.ctx(), x, 0.0f, 0.25f);  // every element 0.25: only the index order decides.
    }
    case Rows::kSomeInf:
      return b.Mask(DType::kF32, ne, kInfShare, /*masked_row=*/1);
    case Rows::kSomeNan: {  // -inf * 0 is NaN, a finite entry * 0 is 0.
      TG_ASSIGN_OR_RETURN(Tensor * mask, b.Mask(DType::kF32, ne, kNanShare, /*masked_row=*/1));
      TG_ASSIGN_OR_RETURN(Tensor * nans, Scale(b.ctx(), mask, 0.0f, 0.0f));
      TG_ASSIGN_OR_RETURN(Tensor * x, b.Uniform(DType::kF32, ne));
      return Add(b.ctx(), nans, x);
    }
    case Rows::kFewValues: {  // rows of an f16 table (2-d shapes), as F32.
      TG_ASSIGN_OR_RETURN(Tensor * table, b.Uniform(DType::kF16, ne, kFewLo, kFewHi));
      TG_ASSIGN_OR_RETURN(Tensor * rows_idx, b.DistinctIndices({ne[1]}, ne[1]));
      return GetRows(b.ctx(), table, rows_idx);
    }
    case Rows::kUniform:
      break;
  }
  return b.Uniform(DType::kF32, ne);
}

OpCase ArgsortCase(Shape4 ne, SortOrder order, Rows rows) {
  const std::string note =
      absl::StrCat(order == SortOrder::kDescending ? "descending" : "ascending",
                   rows == Rows::kUniform ? "" : ", ", RowsNote(rows));
  return {Op::kArgsort, note, kExactIds, [=](CaseBuilder& b) -> TensorOr {
            TG_ASSIGN_OR_RETURN(Tensor * x, RowsOperand(b, ne, rows));
            return Argsort(b.ctx(), x, order);
          }};
}

OpCase TopKCase(Shape4 ne, int64_t k, Rows rows) {
  const std::string note =
      absl::StrCat("k=", k, rows == Rows::kUniform ? "" : ", ", RowsNote(rows));
  return {Op::kTopK, note, kExactIds, [=](CaseBuilder& b) -> TensorOr {
            TG_ASSIGN_OR_RETURN(Tensor * x, RowsOperand(b, ne, rows));
            return TopK(b.ctx(), x, k);
          }};
}

OpCase SumRowsCase(Shape4 ne, Rows rows) {
  return {Op::kSumRows, RowsNote(rows), kNmseF32, [=](CaseBuilder& b) -> TensorOr {
            TG_ASSIGN_OR_RETURN(Tensor * x, RowsOperand(b, ne, rows));
            return SumRows(b.ctx(), x);
          }};
}

// DIV's divisors: away from 0 (quotients in range), all +0 (quotients +-inf), or a share of
// -inf (quotients -+0) among values in [-1, 1).
enum class Divisors { kAwayFromZero, kZeros, kSomeInf };

TensorOr DivisorOperand(CaseBuilder& b, Shape4 ne, Divisors divisors) {
  constexpr float kLo = 0.5f, kHi = 2.0f;
  constexpr double kInfShare = 0.3;
  switch (divisors) {
    case Divisors::kZeros: {
      TG_ASSIGN_OR_RETURN(Tensor * y, b.Uniform(DType::kF32, ne));
      return Scale(b.ctx(), y, 0.0f, 0.0f);
    }
    case Divisors::kSomeInf:
      return b.Mask(DType::kF32, ne, kInfShare);
    case Divisors::kAwayFromZero:
      break;
  }
  return b.Uniform(DType::kF32, ne, kLo, kHi);
}

OpCase DivCase(Shape4 a_ne, Shape4 b_ne, Divisors divisors = Divisors::kAwayFromZero) {
  const char* note = divisors == Divisors::kZeros     ? "by zero: +-inf"
                     : divisors == Divisors::kSomeInf ? "-inf divisors: +-0"
                                                      : "";
  return {Op::kDiv, note, kNmseExact, [=](CaseBuilder& b) -> TensorOr {
            TG_ASSIGN_OR_RETURN(Tensor * x, b.Uniform(DType::kF32, a_ne));
            TG_ASSIGN_OR_RETURN(Tensor * y, DivisorOperand(b, b_ne, divisors));
            return Div(b.ctx(), x, y);
          }};
}

}  // namespace

void AddRouterCases(std::vector<OpCase>* cases) {
  constexpr int64_t kExperts = 16;  // the router's row: one logit per expert.
  constexpr int64_t kTokens = 7;
  constexpr int64_t kLong = 257;  // longer than any SIMD width, odd.
  const Shape4 router = {kExperts, kTokens, 1, 1};
  constexpr int64_t kSortCap = 1024;  // Vulkan's sort_rows.glsl: rows it sorts whole.
  for (SortOrder order : {SortOrder::kAscending, SortOrder::kDescending}) {
    cases->push_back(ArgsortCase(router, order, Rows::kUniform));
    cases->push_back(ArgsortCase({kLong, 3, 2, 1}, order, Rows::kTransposed));
    cases->push_back(ArgsortCase(router, order, Rows::kAllEqual));
    cases->push_back(ArgsortCase({kExperts, 5, 1, 1}, order, Rows::kSomeInf));
    cases->push_back(ArgsortCase({1000, 3, 1, 1}, order, Rows::kSomeNan));
    cases->push_back(ArgsortCase({kSortCap, 2, 1, 1}, order, Rows::kFewValues));
  }
  for (int64_t k : {int64_t{1}, int64_t{4}, kExperts}) {
    cases->push_back(TopKCase(router, k, Rows::kUniform));
  }
  cases->push_back(TopKCase({128, 9, 1, 1}, 8, Rows::kUniform));  // qwen3moe's 128 over 8.
  cases->push_back(TopKCase({kLong, 3, 2, 1}, 5, Rows::kTransposed));
  cases->push_back(TopKCase(router, 4, Rows::kAllEqual));
  cases->push_back(TopKCase({kExperts, 5, 1, 1}, 6, Rows::kSomeInf));
  cases->push_back(TopKCase({kLong, 4, 1, 1}, 5, Rows::kSomeNan));
  // Longer than kSortCap: the k largest are selected before they are sorted.
  cases->push_back(TopKCase({5000, 3, 1, 1}, 7, Rows::kUniform));
  cases->push_back(TopKCase({3001, 2, 1, 1}, 1, Rows::kAllEqual));
  cases->push_back(TopKCase({4000, 3, 1, 1}, 40, Rows::kFewValues));
  cases->push_back(TopKCase({2000, 4, 1, 1}, kSortCap, Rows::kSomeNan));
  cases->push_back(TopKCase({kSortCap + 1, 3, 2, 1}, 9, Rows::kTransposed));
  cases->push_back(SumRowsCase({4, kTokens, 1, 1}, Rows::kUniform));
  cases->push_back(SumRowsCase({kLong, 3, 2, 1}, Rows::kTransposed));
  cases->push_back(DivCase({4, kTokens, 1, 1}, {1, kTokens, 1, 1}));  // weights / their sum.
  cases->push_back(DivCase({kLong, 5, 3, 1}, {kLong, 5, 3, 1}));
  cases->push_back(DivCase({kLong, 6, 2, 1}, {kLong, 1, 2, 1}));
  cases->push_back(DivCase({kLong, 4, 3, 1}, {1, 4, 1, 1}, Divisors::kZeros));
  cases->push_back(DivCase({kLong, 4, 1, 1}, {kLong, 4, 1, 1}, Divisors::kSomeInf));
}

}  // namespace tg::ops_tool
