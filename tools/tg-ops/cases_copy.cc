// CPY, CONT and view-op cases. CPY covers every plain type pair, F32 to each quantized type
// and back, strided sources and destinations and shape-changing copies. The view ops
// (VIEW, RESHAPE, PERMUTE, TRANSPOSE) alias memory and compute nothing, so each is checked
// as the source of a CONT: the copy reads through the view, and its data is compared.
#include <functional>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/ops.h"
#include "tools/tg-ops/case_helpers.h"
#include "core/status_macros.h"

namespace tg::ops_tool {
namespace {

// Plain values span a range where I32 copies are interesting and F16 stays finite.
constexpr float kPlainRange = 100.0f;

const DType kQuantTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K};
// Types only read (dequantized: CPY to F32, as the F16 operands of the cuBLAS MUL_MAT path).
const DType kReadOnlyQuantTypes[] = {DType::kQ5_0, DType::kQ5_1,   DType::kQ2_K,   DType::kQ3_K,
                                     DType::kQ5_K, DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4};

double CopyNmse(DType to) { return IsQuantized(to) ? kNmseQuantize : kNmseExact; }

// CPY of a[a_ne] (made by `src`) into a new leaf b[b_ne] of type `to`.
using SourceFn = std::function<TensorOr(CaseBuilder&)>;
OpCase CpyCase(SourceFn src, DType to, Shape4 b_ne, std::string note = "",
               bool b_transposed = false) {
  return {Op::kCpy, std::move(note), CopyNmse(to), [=](CaseBuilder& b) -> TensorOr {
            TG_ASSIGN_OR_RETURN(Tensor * a, src(b));
            TensorOr dst = b_transposed ? TransposedLeaf(b, to, b_ne) : b.Uniform(to, b_ne);
            if (!dst.ok()) return dst.status();
            return Cpy(b.ctx(), a, *dst);
          }};
}

SourceFn Plain(DType type, Shape4 ne) {
  return [=](CaseBuilder& b) { return b.Uniform(type, ne, -kPlainRange, kPlainRange); };
}

// A non-contiguous source made by one of the case_helpers.h makers.
using StridedMaker = TensorOr (*)(CaseBuilder&, DType, Shape4, float, float);
SourceFn Strided(StridedMaker make, DType type, Shape4 ne) {
  return [=](CaseBuilder& b) { return make(b, type, ne, -kPlainRange, kPlainRange); };
}

void AddCpyCases(std::vector<OpCase>* cases) {
  const std::pair<DType, DType> pairs[] = {
      {DType::kF32, DType::kF16},  {DType::kF16, DType::kF32},   {DType::kF32, DType::kBF16},
      {DType::kBF16, DType::kF32}, {DType::kF16, DType::kBF16},  {DType::kBF16, DType::kF16},
      {DType::kF32, DType::kI32},  {DType::kI32, DType::kF32},   {DType::kF32, DType::kF32},
      {DType::kF16, DType::kF16},  {DType::kBF16, DType::kBF16}, {DType::kI32, DType::kI32},
  };
  const Shape4 ne = {67, 5, 3, 1};
  for (const auto& [from, to] : pairs) cases->push_back(CpyCase(Plain(from, ne), to, ne));
  const Shape4 qne = {256, 5, 2, 1};
  for (DType q : kQuantTypes) {
    cases->push_back(CpyCase(Plain(DType::kF32, qne), q, qne, "quantize"));
    cases->push_back(CpyCase(Plain(q, qne), DType::kF32, qne, "dequantize"));
  }
  for (DType q : kReadOnlyQuantTypes) {
    cases->push_back(CpyCase(Plain(q, qne), DType::kF32, qne, "dequantize"));
  }
  cases->push_back(CpyCase(Plain(DType::kQ4_K, qne), DType::kQ4_K, qne));
  // Strided sources and destinations, shape changes, a single column.
  cases->push_back(CpyCase(Strided(TransposedLeaf, DType::kF32, {67, 5, 1, 1}), DType::kF16,
                           {67, 5, 1, 1}, "a transposed"));
  cases->push_back(
      CpyCase(Plain(DType::kF32, {67, 5, 1, 1}), DType::kF16, {67, 5, 1, 1}, "b transposed", true));
  cases->push_back(CpyCase(Plain(DType::kF32, {12, 10, 1, 1}), DType::kF16, {30, 4, 1, 1}));
  cases->push_back(CpyCase(Strided(PermutedLeaf, DType::kF32, {256, 3, 4, 1}), DType::kQ8_0,
                           {256, 3, 4, 1}, "a permuted"));
  cases->push_back(CpyCase(Strided(PaddedRowsLeaf, DType::kQ4_0, {64, 6, 2, 1}), DType::kF32,
                           {64, 6, 2, 1}, "a padded rows"));
  cases->push_back(CpyCase(Plain(DType::kF32, {1, 7, 1, 1}), DType::kF16, {1, 7, 1, 1}));
}

// CONT(make(leaf)), checked under `op` (CONT itself or the view op `make` applies).
OpCase ContCase(Op op, DType type, Shape4 leaf_ne,
                std::function<TensorOr(CaseBuilder&, Tensor*)> make, std::string note = "") {
  return {op, std::move(note), kNmseExact, [=](CaseBuilder& b) -> TensorOr {
            TG_ASSIGN_OR_RETURN(Tensor * leaf,
                                    b.Uniform(type, leaf_ne, -kPlainRange, kPlainRange));
            TG_ASSIGN_OR_RETURN(Tensor * view, make(b, leaf));
            return Cont(b.ctx(), view);
          }};
}

auto PermuteBy(int a0, int a1, int a2, int a3) {
  return [=](CaseBuilder& b, Tensor* t) { return Permute(b.ctx(), t, a0, a1, a2, a3); };
}
auto ReshapeTo(Shape4 ne) {
  return [=](CaseBuilder& b, Tensor* t) { return Reshape(b.ctx(), t, ne); };
}
TensorOr Same(CaseBuilder&, Tensor* t) { return t; }
TensorOr Transposed(CaseBuilder& b, Tensor* t) { return Transpose(b.ctx(), t); }
TensorOr PaddedView(CaseBuilder& b, Tensor* t) {
  // Drops the first and last block of every row.
  const int64_t ne[] = {t->ne[0] - 2 * BlockSize(t->type), t->ne[1], t->ne[2], t->ne[3]};
  return View(b.ctx(), t, ne, {t->nb[1], t->nb[2], t->nb[3]}, BlockBytes(t->type));
}

void AddContCases(std::vector<OpCase>* cases) {
  cases->push_back(ContCase(Op::kCont, DType::kF32, {5, 67, 1, 1}, Transposed, "a transposed"));
  cases->push_back(
      ContCase(Op::kCont, DType::kF16, {3, 5, 7, 2}, PermuteBy(1, 2, 0, 3), "a permuted"));
  cases->push_back(ContCase(Op::kCont, DType::kQ4_0, {128, 6, 2, 1}, PaddedView, "a padded rows"));
  cases->push_back(ContCase(Op::kCont, DType::kBF16, {67, 5, 1, 1}, Same));
  cases->push_back(ContCase(Op::kCont, DType::kI32, {7, 9, 1, 1}, Transposed, "a transposed"));
}

void AddViewOpCases(std::vector<OpCase>* cases) {
  // VIEW: a sub-block, a flat slice, every other quantized row, a view of a view.
  cases->push_back(ContCase(Op::kView, DType::kF32, {67, 10, 3, 1}, [](CaseBuilder& b, Tensor* t) {
    return View(b.ctx(), t, {20, 5, 2}, {t->nb[1], t->nb[2]}, 3 * sizeof(float) + t->nb[1]);
  }));
  cases->push_back(ContCase(Op::kView, DType::kF16, {67, 10, 1, 1}, [](CaseBuilder& b, Tensor* t) {
    return View(b.ctx(), t, {100}, {}, 2 * t->nb[1]);
  }));
  cases->push_back(ContCase(Op::kView, DType::kQ8_0, {128, 6, 1, 1}, [](CaseBuilder& b, Tensor* t) {
    return View(b.ctx(), t, {64, 3}, {2 * t->nb[1]}, 2 * BlockBytes(t->type));
  }));
  cases->push_back(ContCase(
      Op::kView, DType::kF32, {16, 8, 4, 1},
      [](CaseBuilder& b, Tensor* t) -> TensorOr {
        TG_ASSIGN_OR_RETURN(Tensor * half,
                                View(b.ctx(), t, {16, 8, 2}, {t->nb[1], t->nb[2]}, t->nb[2]));
        return View(b.ctx(), half, {8, 4, 2}, {2 * half->nb[1], half->nb[2]}, 4 * sizeof(float));
      },
      "view of a view"));
  // RESHAPE, including a reshape of a CONT of a transposed tensor.
  cases->push_back(ContCase(Op::kReshape, DType::kF32, {12, 10, 1, 1}, ReshapeTo({30, 4, 1, 1})));
  cases->push_back(ContCase(Op::kReshape, DType::kF16, {6, 4, 5, 1}, ReshapeTo({120, 1, 1, 1})));
  cases->push_back(ContCase(Op::kReshape, DType::kQ4_0, {64, 6, 1, 1}, ReshapeTo({64, 3, 2, 1})));
  cases->push_back(ContCase(
      Op::kReshape, DType::kF32, {8, 5, 1, 1},
      [](CaseBuilder& b, Tensor* t) -> TensorOr {
        TG_ASSIGN_OR_RETURN(Tensor * tr, Transpose(b.ctx(), t));
        TG_ASSIGN_OR_RETURN(Tensor * cont, Cont(b.ctx(), tr));
        return Reshape(b.ctx(), cont, {10, 4});
      },
      "of a cont of a transpose"));
  // PERMUTE: several axis orders, also of a quantized tensor (rows stay rows).
  cases->push_back(
      ContCase(Op::kPermute, DType::kF32, {3, 4, 5, 6}, PermuteBy(2, 0, 1, 3), "2,0,1,3"));
  cases->push_back(
      ContCase(Op::kPermute, DType::kF32, {3, 4, 5, 6}, PermuteBy(1, 2, 3, 0), "1,2,3,0"));
  cases->push_back(
      ContCase(Op::kPermute, DType::kF32, {3, 4, 5, 6}, PermuteBy(3, 2, 1, 0), "3,2,1,0"));
  cases->push_back(
      ContCase(Op::kPermute, DType::kF16, {8, 3, 5, 1}, PermuteBy(0, 2, 1, 3), "0,2,1,3"));
  cases->push_back(
      ContCase(Op::kPermute, DType::kQ8_0, {64, 3, 4, 2}, PermuteBy(0, 3, 1, 2), "0,3,1,2"));
  // TRANSPOSE, and a transpose of a transpose (contiguous again).
  cases->push_back(ContCase(Op::kTranspose, DType::kF32, {67, 5, 1, 1}, Transposed));
  cases->push_back(ContCase(Op::kTranspose, DType::kF16, {3, 7, 2, 1}, Transposed));
  cases->push_back(ContCase(
      Op::kTranspose, DType::kBF16, {9, 4, 1, 1},
      [](CaseBuilder& b, Tensor* t) -> TensorOr {
        TG_ASSIGN_OR_RETURN(Tensor * once, Transpose(b.ctx(), t));
        return Transpose(b.ctx(), once);
      },
      "twice"));
}

}  // namespace

void AddCopyCases(std::vector<OpCase>* cases) {
  AddCpyCases(cases);
  AddContCases(cases);
  AddViewOpCases(cases);
}

}  // namespace tg::ops_tool
