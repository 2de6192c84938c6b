// Element-wise and row-wise F32 op cases: ADD/MUL (with broadcasting), SCALE, RMS_NORM, SILU,
// SWIGLU, SOFT_MAX (f32/f16 masks, -inf entries, fully masked rows) and ARGMAX.
#include <string>

#include "absl/strings/str_cat.h"
#include "core/enum_names.h"
#include "core/ops.h"
#include "core/status_macros.h"
#include "tools/tg-ops/case_helpers.h"

namespace tg::ops_tool {
namespace {

// How an F32 operand of shape ne is laid out.
enum class Layout { kContiguous, kTransposed, kPaddedRows };

TensorOr Operand(CaseBuilder& b, Shape4 ne, Layout layout, float lo = -1.0f, float hi = 1.0f) {
  switch (layout) {
    case Layout::kTransposed:
      return TransposedLeaf(b, DType::kF32, ne, lo, hi);
    case Layout::kPaddedRows:
      return PaddedRowsLeaf(b, DType::kF32, ne, lo, hi);
    case Layout::kContiguous:
      break;
  }
  return b.Uniform(DType::kF32, ne, lo, hi);
}

constexpr EnumName<Layout> kLayoutNotes[] = {
    {Layout::kTransposed, "transposed"},
    {Layout::kPaddedRows, "padded rows"},
};

const char* LayoutNote(Layout layout) { return NameOf(kLayoutNotes, layout, ""); }

OpCase BinaryCase(Op op, Shape4 a_ne, Shape4 b_ne, Layout layout = Layout::kContiguous) {
  return {op, LayoutNote(layout), kNmseExact, [=](CaseBuilder& b) -> TensorOr {
            TG_ASSIGN_OR_RETURN(Tensor * x, Operand(b, a_ne, layout));
            TG_ASSIGN_OR_RETURN(Tensor * y, Operand(b, b_ne, layout));
            return op == Op::kAdd ? Add(b.ctx(), x, y) : Mul(b.ctx(), x, y);
          }};
}

// SCALE, RMS_NORM, SILU on one operand.
OpCase UnaryCase(Op op, Shape4 ne, Layout layout = Layout::kContiguous) {
  constexpr float kScale = 0.75f;
  constexpr float kBias = -0.5f;
  constexpr float kEps = 1e-5f;
  const double max_nmse = op == Op::kScale ? kNmseExact : kNmseF32;
  return {op, LayoutNote(layout), max_nmse, [=](CaseBuilder& b) -> TensorOr {
            TG_ASSIGN_OR_RETURN(Tensor * x, Operand(b, ne, layout, -4.0f, 4.0f));
            if (op == Op::kScale) return Scale(b.ctx(), x, kScale, kBias);
            if (op == Op::kRmsNorm) return RmsNorm(b.ctx(), x, kEps);
            return Silu(b.ctx(), x);
          }};
}

OpCase SwigluCase(Shape4 ne, Layout layout = Layout::kContiguous) {
  return {Op::kSwiglu, LayoutNote(layout), kNmseF32, [=](CaseBuilder& b) -> TensorOr {
            TG_ASSIGN_OR_RETURN(Tensor * gate, Operand(b, ne, layout, -4.0f, 4.0f));
            TG_ASSIGN_OR_RETURN(Tensor * up, Operand(b, ne, layout));
            return Swiglu(b.ctx(), gate, up);
          }};
}

// gpt-oss's clamped SwiGLU with operands in [-10, 10], so that limit 7 clamps both sides.
OpCase SwigluOaiCase(Shape4 ne, Layout layout = Layout::kContiguous) {
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;  // gpt-oss's.
  return {Op::kSwigluOai, LayoutNote(layout), kNmseF32, [=](CaseBuilder& b) -> TensorOr {
            TG_ASSIGN_OR_RETURN(Tensor * gate, Operand(b, ne, layout, -10.0f, 10.0f));
            TG_ASSIGN_OR_RETURN(Tensor * up, Operand(b, ne, layout, -10.0f, 10.0f));
            return SwigluOai(b.ctx(), gate, up, kAlpha, kLimit);
          }};
}

// ARGMAX of uniform rows, or of rows with a share of -inf and one row of -inf only (index 0).
OpCase ArgmaxCase(Shape4 ne, Layout layout = Layout::kContiguous, bool with_inf = false) {
  std::string note = LayoutNote(layout);
  if (with_inf) note = "-inf entries, one all -inf row";
  return {Op::kArgmax, note, kNmseExact, [=](CaseBuilder& b) -> TensorOr {
            Tensor* x;
            if (with_inf) {
              TG_ASSIGN_OR_RETURN(x, b.Mask(DType::kF32, ne, 0.5, /*masked_row=*/1));
            } else {
              TG_ASSIGN_OR_RETURN(x, Operand(b, ne, layout));
            }
            return Argmax(b.ctx(), x);
          }};
}

struct SoftMaxSpec {
  Shape4 a_ne;
  DType mask_type = DType::kF32;
  Shape4 mask_ne = {0, 0, 0, 0};  // ne[0] == 0: no mask.
  double inf_fraction = 0.0;
  int64_t masked_row = -1;
  float scale = 1.0f;
  float range = 1.0f;  // a is uniform in [-range, range).
  Layout layout = Layout::kContiguous;
  bool sinks = false;  // one sink logit per head (a.ne[2]).
};

OpCase SoftMaxCase(const SoftMaxSpec& s) {
  std::string note = absl::StrCat("scale=", s.scale);
  if (s.inf_fraction > 0) absl::StrAppend(&note, ", -inf mask entries");
  if (s.masked_row >= 0) absl::StrAppend(&note, ", fully masked row");
  if (s.range > 1.0f) absl::StrAppend(&note, ", |a| up to ", s.range);
  if (s.layout != Layout::kContiguous) absl::StrAppend(&note, ", ", LayoutNote(s.layout));
  if (s.sinks) absl::StrAppend(&note, ", sinks");
  return {Op::kSoftMax, note, kNmseF32, [s](CaseBuilder& b) -> TensorOr {
            TG_ASSIGN_OR_RETURN(Tensor * a, Operand(b, s.a_ne, s.layout, -s.range, s.range));
            Tensor* mask = nullptr;
            if (s.mask_ne[0] != 0) {
              TG_ASSIGN_OR_RETURN(mask,
                                  b.Mask(s.mask_type, s.mask_ne, s.inf_fraction, s.masked_row));
            }
            Tensor* sinks = nullptr;
            if (s.sinks) {
              TG_ASSIGN_OR_RETURN(sinks, b.Uniform(DType::kF32, {s.a_ne[2]}, -2.0f, 2.0f));
            }
            return SoftMax(b.ctx(), a, mask, s.scale, sinks);
          }};
}

void AddSoftMaxCases(std::vector<OpCase>* cases) {
  constexpr double kSomeInf = 0.2;
  constexpr float kAttnScale = 0.125f;
  const SoftMaxSpec specs[] = {
      {.a_ne = {67, 5, 3, 1}},
      {.a_ne = {67, 5, 3, 1},
       .mask_ne = {67, 8, 1, 1},
       .inf_fraction = kSomeInf,
       .scale = kAttnScale},
      {.a_ne = {67, 5, 3, 1},
       .mask_type = DType::kF16,
       .mask_ne = {67, 5, 3, 1},
       .inf_fraction = kSomeInf},
      {.a_ne = {33, 4, 4, 2}, .mask_ne = {33, 4, 2, 1}, .inf_fraction = kSomeInf},
      {.a_ne = {16, 6, 2, 1}, .mask_ne = {16, 6, 1, 1}, .masked_row = 2},
      {.a_ne = {16, 6, 2, 1},
       .mask_type = DType::kF16,
       .mask_ne = {16, 6, 1, 1},
       .inf_fraction = kSomeInf,
       .masked_row = 5},
      {.a_ne = {1, 7, 1, 1}},
      {.a_ne = {1024, 4, 1, 1},
       .mask_type = DType::kF16,
       .mask_ne = {1024, 4, 1, 1},
       .inf_fraction = 0.1,
       .scale = kAttnScale},
      {.a_ne = {40, 12, 1, 1},
       .mask_ne = {40, 12, 1, 1},
       .inf_fraction = kSomeInf,
       .layout = Layout::kTransposed},
      {.a_ne = {67, 5, 1, 1}, .range = 50.0f},
      // gpt-oss's attention sinks: scores [n_kv, n_q, n_head] with a causal-style mask.
      {.a_ne = {67, 5, 4, 1},
       .mask_ne = {67, 5, 1, 1},
       .inf_fraction = kSomeInf,
       .masked_row = 3,
       .scale = kAttnScale,
       .sinks = true},
      {.a_ne = {40, 6, 3, 1}, .sinks = true},
  };
  for (const SoftMaxSpec& s : specs) cases->push_back(SoftMaxCase(s));
}

}  // namespace

void AddElementwiseCases(std::vector<OpCase>* cases) {
  for (Op op : {Op::kAdd, Op::kMul}) {
    cases->push_back(BinaryCase(op, {67, 5, 3, 2}, {67, 5, 3, 2}));
    cases->push_back(BinaryCase(op, {67, 5, 3, 2}, {67, 1, 1, 1}));
    cases->push_back(BinaryCase(op, {67, 5, 3, 2}, {1, 5, 1, 2}));
    cases->push_back(BinaryCase(op, {1, 7, 2, 1}, {1, 1, 2, 1}));
    cases->push_back(BinaryCase(op, {33, 8, 2, 1}, {33, 4, 1, 1}, Layout::kTransposed));
    cases->push_back(BinaryCase(op, {64, 6, 2, 1}, {64, 3, 2, 1}, Layout::kPaddedRows));
  }
  for (Op op : {Op::kScale, Op::kRmsNorm, Op::kSilu}) {
    cases->push_back(UnaryCase(op, {67, 5, 3, 1}));
    cases->push_back(UnaryCase(op, {1, 9, 1, 1}));
    cases->push_back(UnaryCase(op, {40, 12, 1, 1}, Layout::kTransposed));
  }
  cases->push_back(UnaryCase(Op::kRmsNorm, {4096, 3, 1, 1}));
  cases->push_back(UnaryCase(Op::kRmsNorm, {64, 6, 2, 1}, Layout::kPaddedRows));
  cases->push_back(SwigluCase({67, 5, 3, 1}));
  cases->push_back(SwigluCase({1, 9, 1, 1}));
  cases->push_back(SwigluCase({40, 12, 1, 1}, Layout::kTransposed));
  cases->push_back(SwigluOaiCase({67, 5, 3, 1}));
  cases->push_back(SwigluOaiCase({2880, 4, 2, 1}));  // gpt-oss's expert width, 2 experts used.
  cases->push_back(SwigluOaiCase({40, 12, 1, 1}, Layout::kTransposed));
  AddSoftMaxCases(cases);
  cases->push_back(ArgmaxCase({67, 5, 3, 1}));
  cases->push_back(ArgmaxCase({32000, 2, 1, 1}));
  cases->push_back(ArgmaxCase({40, 12, 1, 1}, Layout::kPaddedRows));
  cases->push_back(ArgmaxCase({67, 8, 1, 1}, Layout::kContiguous, /*with_inf=*/true));
}

}  // namespace tg::ops_tool
