// Shared pieces of the case catalogue files (cases_*.cc): non-contiguous operand makers and
// the per-family functions that append their cases to the catalogue.
#ifndef TENSORGRID_TOOLS_TG_OPS_CASE_HELPERS_H_
#define TENSORGRID_TOOLS_TG_OPS_CASE_HELPERS_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "tools/tg-ops/case_builder.h"
#include "tools/tg-ops/op_cases.h"

namespace tg::ops_tool {

using Shape4 = std::array<int64_t, 4>;
using TensorOr = absl::StatusOr<Tensor*>;

// Every weight type the backends decode: MUL_MAT's weights and GET_ROWS' sources.
inline constexpr DType kWeightTypes[] = {DType::kF32,  DType::kF16,    DType::kBF16,  DType::kQ8_0,
                                         DType::kQ4_0, DType::kQ4_K,   DType::kQ6_K,  DType::kQ5_0,
                                         DType::kQ5_1, DType::kIQ4_NL, DType::kMXFP4, DType::kQ5_K,
                                         DType::kQ3_K, DType::kQ2_K,   DType::kIQ4_XS};

// A [ne0, ne1, ne2, ne3] operand whose dims 0 and 1 are swapped in memory (TRANSPOSE of a
// leaf), so it is read with nb[0] != element size. Plain types only.
TensorOr TransposedLeaf(CaseBuilder& b, DType type, Shape4 ne, float lo = -1.0f, float hi = 1.0f);
// A [ne0, ne1, ne2, ne3] operand whose rows are contiguous but spaced further apart (a VIEW
// into a leaf with longer rows, starting one block in).
TensorOr PaddedRowsLeaf(CaseBuilder& b, DType type, Shape4 ne, float lo = -1.0f, float hi = 1.0f);
// A [ne0, ne1, ne2, ne3] operand with dims 1 and 2 swapped in memory (PERMUTE 0,2,1,3).
TensorOr PermutedLeaf(CaseBuilder& b, DType type, Shape4 ne, float lo = -1.0f, float hi = 1.0f);

// Elements per row that a type allows and that exercise odd block counts.
int64_t OddRowLength(DType type);

void AddMatMulCases(std::vector<OpCase>* cases);
void AddRowsCases(std::vector<OpCase>* cases);         // GET_ROWS, SET_ROWS.
void AddCopyCases(std::vector<OpCase>* cases);         // CPY, CONT and the view ops.
void AddElementwiseCases(std::vector<OpCase>* cases);  // ADD .. SWIGLU, SOFT_MAX.
void AddRopeCases(std::vector<OpCase>* cases);
void AddAttentionCases(std::vector<OpCase>* cases);
void AddSampleCases(std::vector<OpCase>* cases);
void AddRouterCases(std::vector<OpCase>* cases);  // ARGSORT, TOP_K, SUM_ROWS, DIV.

}  // namespace tg::ops_tool

#endif  // TENSORGRID_TOOLS_TG_OPS_CASE_HELPERS_H_
