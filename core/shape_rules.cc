#include "core/shape_rules.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/context.h"

namespace tg {
namespace {

absl::Status Invalid(const Tensor& node, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(OpName(node.op), " '", node.name, "': ", what));
}

// The tensor whose memory `t` lives in (itself unless it is a view).
Tensor* Root(Tensor* t) { return t->view_src != nullptr ? t->view_src : t; }

NodeLayout Contiguous(DType type, const int64_t ne[kMaxDims]) {
  NodeLayout l;
  l.type = type;
  Tensor tmp;
  tmp.type = type;
  std::copy(ne, ne + kMaxDims, tmp.ne);
  SetContiguousStrides(&tmp);
  std::copy(tmp.ne, tmp.ne + kMaxDims, l.ne);
  std::copy(tmp.nb, tmp.nb + kMaxDims, l.nb);
  return l;
}

NodeLayout AliasOf(Tensor* t) {
  NodeLayout l;
  l.type = t->type;
  std::copy(t->ne, t->ne + kMaxDims, l.ne);
  std::copy(t->nb, t->nb + kMaxDims, l.nb);
  l.view_src = Root(t);
  l.view_offs = t->view_src != nullptr ? t->view_offs : 0;
  return l;
}

std::string Shape(const Tensor& t) { return DescribeTensor(t); }

bool IsFloatType(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

absl::Status CheckFinite(const Tensor& node, int slot, const char* what) {
  if (!std::isfinite(node.ParamF32(slot))) {
    return Invalid(node, absl::StrCat(what, " is not finite"));
  }
  return absl::OkStatus();
}

absl::Status RequireType(const Tensor& node, const Tensor& t, DType type, const char* role) {
  if (t.type != type) {
    return Invalid(node, absl::StrCat(role, " ", Shape(t), " must be ", DTypeName(type)));
  }
  return absl::OkStatus();
}

absl::Status RequireRowsContiguous(const Tensor& node, const Tensor& t, const char* role) {
  if (!t.RowsContiguous()) {
    return Invalid(node, absl::StrCat(role, " ", Shape(t), " must have contiguous rows"));
  }
  return absl::OkStatus();
}

absl::StatusOr<NodeLayout> GetRowsRule(const Tensor& n) {
  const Tensor& a = *n.src[0];
  const Tensor& idx = *n.src[1];
  if (a.type == DType::kI32) return Invalid(n, "source rows cannot be i32");
  if (auto s = RequireRowsContiguous(n, a, "source"); !s.ok()) return s;
  if (auto s = RequireType(n, idx, DType::kI32, "index"); !s.ok()) return s;
  if (a.ne[2] != idx.ne[1] || a.ne[3] != idx.ne[2] || idx.ne[3] != 1) {
    return Invalid(n, absl::StrCat("index ", Shape(idx), " does not match source ", Shape(a),
                                   " (need index [rows, ne2, ne3])"));
  }
  const int64_t ne[4] = {a.ne[0], idx.ne[0], idx.ne[1], idx.ne[2]};
  return Contiguous(DType::kF32, ne);
}

absl::StatusOr<NodeLayout> SetRowsRule(const Tensor& n) {
  Tensor* a = n.src[0];
  const Tensor& b = *n.src[1];
  const Tensor& idx = *n.src[2];
  if (a->type == DType::kI32) return Invalid(n, "destination cannot be i32");
  if (auto s = RequireRowsContiguous(n, *a, "destination"); !s.ok()) return s;
  if (auto s = RequireType(n, b, DType::kF32, "rows"); !s.ok()) return s;
  if (auto s = RequireType(n, idx, DType::kI32, "index"); !s.ok()) return s;
  if (b.ne[0] != a->ne[0] || b.ne[2] != a->ne[2] || b.ne[3] != a->ne[3]) {
    return Invalid(n, absl::StrCat("rows ", Shape(b), " do not fit destination ", Shape(*a)));
  }
  if (idx.ne[0] != b.ne[1] || idx.ne[3] != 1 || b.ne[2] % idx.ne[1] != 0 ||
      b.ne[3] % idx.ne[2] != 0) {
    return Invalid(n, absl::StrCat("index ", Shape(idx), " does not match rows ", Shape(b)));
  }
  return AliasOf(a);
}

absl::StatusOr<NodeLayout> MulMatRule(const Tensor& n) {
  const Tensor& a = *n.src[0];
  const Tensor& b = *n.src[1];
  if (a.type == DType::kI32) return Invalid(n, "weight cannot be i32");
  if (auto s = RequireRowsContiguous(n, a, "weight"); !s.ok()) return s;
  if (auto s = RequireType(n, b, DType::kF32, "activation"); !s.ok()) return s;
  if (a.ne[0] != b.ne[0]) {
    return Invalid(n, absl::StrCat("inner dimensions differ: ", Shape(a), " x ", Shape(b)));
  }
  if (b.ne[2] % a.ne[2] != 0 || b.ne[3] % a.ne[3] != 0) {
    return Invalid(n, absl::StrCat("cannot broadcast ", Shape(a), " over ", Shape(b)));
  }
  const int64_t ne[4] = {a.ne[1], b.ne[1], b.ne[2], b.ne[3]};
  return Contiguous(DType::kF32, ne);
}

absl::StatusOr<NodeLayout> MulMatIdRule(const Tensor& n) {
  const Tensor& as = *n.src[0];
  const Tensor& b = *n.src[1];
  const Tensor& ids = *n.src[2];
  if (as.type == DType::kI32) return Invalid(n, "experts cannot be i32");
  if (auto s = RequireRowsContiguous(n, as, "experts"); !s.ok()) return s;
  if (auto s = RequireType(n, b, DType::kF32, "activation"); !s.ok()) return s;
  if (auto s = RequireType(n, ids, DType::kI32, "ids"); !s.ok()) return s;
  const int64_t n_used = ids.ne[0];
  const int64_t tokens = ids.ne[1];
  if (as.ne[3] != 1 || ids.ne[2] != 1 || ids.ne[3] != 1 || b.ne[3] != 1) {
    return Invalid(n, "experts, activations and ids must be at most 3-, 3- and 2-dimensional");
  }
  if (as.ne[0] != b.ne[0] || b.ne[2] != tokens || (b.ne[1] != n_used && b.ne[1] != 1)) {
    return Invalid(n, absl::StrCat("shapes do not match: experts ", Shape(as), ", activations ",
                                   Shape(b), ", ids ", Shape(ids)));
  }
  const int32_t first = n.op_params[kMulMatIdFirstExpert];
  const int32_t count = n.op_params[kMulMatIdExpertCount];
  if (first < 0 || (count == 0 && first != 0) || (count != 0 && count != as.ne[2])) {
    return Invalid(n, absl::StrCat("expert range (first ", first, ", count ", count,
                                   ") must be (0, 0) (off) or (first >= 0, the ", as.ne[2],
                                   " experts the weights hold)"));
  }
  const int64_t ne[4] = {as.ne[1], n_used, tokens, 1};
  return Contiguous(DType::kF32, ne);
}

absl::StatusOr<NodeLayout> BinaryRule(const Tensor& n) {
  const Tensor& a = *n.src[0];
  const Tensor& b = *n.src[1];
  if (auto s = RequireType(n, a, DType::kF32, "first operand"); !s.ok()) return s;
  if (auto s = RequireType(n, b, DType::kF32, "second operand"); !s.ok()) return s;
  for (int i = 0; i < kMaxDims; ++i) {
    if (b.ne[i] == 0 || a.ne[i] % b.ne[i] != 0) {
      return Invalid(n, absl::StrCat("cannot broadcast ", Shape(b), " to ", Shape(a)));
    }
  }
  return Contiguous(DType::kF32, a.ne);
}

absl::StatusOr<NodeLayout> UnaryF32Rule(const Tensor& n) {
  if (auto s = RequireType(n, *n.src[0], DType::kF32, "source"); !s.ok()) return s;
  return Contiguous(DType::kF32, n.src[0]->ne);
}

absl::StatusOr<NodeLayout> ArgmaxRule(const Tensor& n) {
  const Tensor& a = *n.src[0];
  if (auto s = RequireType(n, a, DType::kF32, "source"); !s.ok()) return s;
  if (a.nb[0] != sizeof(float)) return Invalid(n, "source rows must be contiguous");
  if (a.ne[0] < 1) return Invalid(n, "source rows are empty");
  const int64_t ne[kMaxDims] = {1, a.ne[1], a.ne[2], a.ne[3]};
  return Contiguous(DType::kI32, ne);
}

// ARGSORT, TOP_K and SUM_ROWS read F32 rows whose elements may be strided.
absl::Status CheckF32Rows(const Tensor& n) {
  const Tensor& a = *n.src[0];
  if (auto s = RequireType(n, a, DType::kF32, "source"); !s.ok()) return s;
  if (a.ne[0] < 1) return Invalid(n, "source rows are empty");
  return absl::OkStatus();
}

absl::StatusOr<NodeLayout> ArgsortRule(const Tensor& n) {
  if (auto s = CheckF32Rows(n); !s.ok()) return s;
  if (n.op_params[0] != 0 && n.op_params[0] != 1) {
    return Invalid(n, absl::StrFormat("order %d unknown (0 = ascending, 1 = descending)",
                                      n.op_params[0]));
  }
  return Contiguous(DType::kI32, n.src[0]->ne);
}

absl::StatusOr<NodeLayout> TopKRule(const Tensor& n) {
  if (auto s = CheckF32Rows(n); !s.ok()) return s;
  const Tensor& a = *n.src[0];
  const int32_t k = n.op_params[0];
  if (k < 1 || k > a.ne[0]) {
    return Invalid(n, absl::StrFormat("k = %d must be in [1, %d] (the row length of %s)", k,
                                      a.ne[0], Shape(a)));
  }
  const int64_t ne[kMaxDims] = {k, a.ne[1], a.ne[2], a.ne[3]};
  return Contiguous(DType::kI32, ne);
}

absl::StatusOr<NodeLayout> SumRowsRule(const Tensor& n) {
  if (auto s = CheckF32Rows(n); !s.ok()) return s;
  const Tensor& a = *n.src[0];
  const int64_t ne[kMaxDims] = {1, a.ne[1], a.ne[2], a.ne[3]};
  return Contiguous(DType::kF32, ne);
}

// Logits rows as ARGMAX takes them, one I32 position per row, an optional 1-d I32 window of
// recent tokens, and parameters in their documented ranges (docs/ops.md, SAMPLE).
absl::StatusOr<NodeLayout> SampleRule(const Tensor& n) {
  const Tensor& pos = *n.src[1];
  if (auto s = RequireType(n, pos, DType::kI32, "positions"); !s.ok()) return s;
  if (!pos.IsContiguous() || pos.NumElements() != n.src[0]->NumRows()) {
    return Invalid(n, absl::StrCat("positions ", Shape(pos),
                                   " must be contiguous with one per row of ", Shape(*n.src[0])));
  }
  if (const Tensor* recent = n.src[2]; recent != nullptr) {
    if (auto s = RequireType(n, *recent, DType::kI32, "recent tokens"); !s.ok()) return s;
    if (!recent->IsContiguous() || recent->NumElements() != recent->ne[0]) {
      return Invalid(n,
                     absl::StrCat("recent tokens ", Shape(*recent), " must be 1-d and contiguous"));
    }
  }
  constexpr std::pair<int, const char*> kFloats[] = {
      {0, "temperature"}, {2, "top_p"}, {3, "min_p"}, {4, "repeat_penalty"}};
  for (const auto& [slot, name] : kFloats) {
    if (auto s = CheckFinite(n, slot, name); !s.ok()) return s;
  }
  const float top_p = n.ParamF32(2);
  const float min_p = n.ParamF32(3);
  if (n.op_params[1] < 0) {
    return Invalid(n, absl::StrFormat("top_k %d is negative (0: off)", n.op_params[1]));
  }
  if (top_p < 0 || top_p > 1) return Invalid(n, absl::StrCat("top_p ", top_p, " outside [0, 1]"));
  if (min_p < 0 || min_p > 1) return Invalid(n, absl::StrCat("min_p ", min_p, " outside [0, 1]"));
  if (n.ParamF32(4) <= 0) {
    return Invalid(n, absl::StrCat("repeat_penalty ", n.ParamF32(4), " must be positive"));
  }
  return ArgmaxRule(n);
}

absl::StatusOr<NodeLayout> ScaleRule(const Tensor& n) {
  if (auto s = CheckFinite(n, 0, "scale"); !s.ok()) return s;
  if (auto s = CheckFinite(n, 1, "bias"); !s.ok()) return s;
  return UnaryF32Rule(n);
}

absl::StatusOr<NodeLayout> RmsNormRule(const Tensor& n) {
  const float eps = n.ParamF32(0);
  if (!std::isfinite(eps) || eps < 0) return Invalid(n, absl::StrCat("bad eps ", eps));
  return UnaryF32Rule(n);
}

absl::StatusOr<NodeLayout> RopeRule(const Tensor& n) {
  const Tensor& a = *n.src[0];
  const Tensor& pos = *n.src[1];
  const int32_t n_dims = n.op_params[0];
  const int32_t mode = n.op_params[1];
  if (auto s = RequireType(n, a, DType::kF32, "source"); !s.ok()) return s;
  if (auto s = RequireType(n, pos, DType::kI32, "positions"); !s.ok()) return s;
  if (n_dims <= 0 || n_dims % 2 != 0 || n_dims > a.ne[0]) {
    return Invalid(n, absl::StrFormat("n_dims %d must be even and in (0, %d]", n_dims, a.ne[0]));
  }
  if (mode != 0 && mode != 2) {
    return Invalid(n, absl::StrFormat("mode %d unknown (0 = normal, 2 = neox)", mode));
  }
  if (pos.ne[0] != a.ne[2] || pos.NumElements() != pos.ne[0]) {
    return Invalid(n, absl::StrCat("positions ", Shape(pos), " must be 1-d with one per token of ",
                                   Shape(a)));
  }
  if (Tensor* ff = n.src[2]; ff != nullptr) {
    if (auto s = RequireType(n, *ff, DType::kF32, "freq factors"); !s.ok()) return s;
    if (ff->ne[0] < n_dims / 2) return Invalid(n, "freq factors shorter than n_dims/2");
  }
  for (int slot = 3; slot <= 8; ++slot) {
    if (auto s = CheckFinite(n, slot, "rope parameter"); !s.ok()) return s;
  }
  if (n.ParamF32(3) <= 0 || n.ParamF32(4) <= 0) {
    return Invalid(n, "freq_base and freq_scale must be positive");
  }
  return Contiguous(DType::kF32, a.ne);
}

absl::StatusOr<NodeLayout> SoftMaxRule(const Tensor& n) {
  const Tensor& a = *n.src[0];
  if (auto s = RequireType(n, a, DType::kF32, "source"); !s.ok()) return s;
  if (auto s = CheckFinite(n, 0, "scale"); !s.ok()) return s;
  if (n.ParamF32(1) != 0.0f) return Invalid(n, "max_bias (ALiBi) is not supported");
  if (const Tensor* m = n.src[1]; m != nullptr) {
    if (m->type != DType::kF32 && m->type != DType::kF16) {
      return Invalid(n, absl::StrCat("mask ", Shape(*m), " must be f32 or f16"));
    }
    if (m->ne[0] != a.ne[0] || m->ne[1] < a.ne[1] || a.ne[2] % m->ne[2] != 0 ||
        a.ne[3] % m->ne[3] != 0) {
      return Invalid(n, absl::StrCat("mask ", Shape(*m), " does not fit ", Shape(a)));
    }
  }
  if (const Tensor* sinks = n.src[2]; sinks != nullptr) {
    if (auto s = RequireType(n, *sinks, DType::kF32, "sinks"); !s.ok()) return s;
    if (!sinks->IsContiguous() || sinks->NumElements() != a.ne[2]) {
      return Invalid(n, absl::StrCat("sinks ", Shape(*sinks), " must be contiguous with one per ",
                                     "head (dimension 2) of ", Shape(a)));
    }
  }
  return Contiguous(DType::kF32, a.ne);
}

absl::StatusOr<NodeLayout> SwigluRule(const Tensor& n) {
  if (auto s = RequireType(n, *n.src[1], DType::kF32, "up"); !s.ok()) return s;
  if (!SameShape(*n.src[0], *n.src[1])) {
    return Invalid(n, absl::StrCat("gate ", Shape(*n.src[0]), " and up ", Shape(*n.src[1]),
                                   " differ in shape"));
  }
  return UnaryF32Rule(n);
}

// SWIGLU's operands; alpha finite and limit positive (a limit <= 0 clamps every value away).
absl::StatusOr<NodeLayout> SwigluOaiRule(const Tensor& n) {
  if (auto s = CheckFinite(n, kSwigluOaiAlpha, "alpha"); !s.ok()) return s;
  const float limit = n.ParamF32(kSwigluOaiLimit);
  if (!(limit > 0) || std::isinf(limit)) {
    return Invalid(n, absl::StrCat("limit ", limit, " must be positive and finite"));
  }
  return SwigluRule(n);
}

bool CanConvert(DType from, DType to) {
  if (from == to) return true;
  if (from == DType::kI32 || to == DType::kI32) {
    return from == DType::kF32 || to == DType::kF32;
  }
  if (IsQuantized(from)) return to == DType::kF32;
  if (IsQuantized(to)) return from == DType::kF32;
  return IsFloatType(from) && IsFloatType(to);
}

absl::StatusOr<NodeLayout> CpyRule(const Tensor& n) {
  const Tensor& a = *n.src[0];
  Tensor* b = n.src[1];
  if (a.NumElements() != b->NumElements()) {
    return Invalid(n, absl::StrCat(Shape(a), " and ", Shape(*b), " differ in element count"));
  }
  if (!CanConvert(a.type, b->type)) {
    return Invalid(n, absl::StrCat("cannot convert ", DTypeName(a.type), " to ",
                                   DTypeName(b->type)));
  }
  if ((IsQuantized(a.type) || IsQuantized(b->type)) &&
      (a.ne[0] != b->ne[0] || !a.RowsContiguous() || !b->RowsContiguous())) {
    return Invalid(n, "a quantized copy needs equal row lengths and contiguous rows");
  }
  return AliasOf(b);
}

absl::StatusOr<NodeLayout> ContRule(const Tensor& n) {
  const Tensor& a = *n.src[0];
  if (IsQuantized(a.type) && !a.RowsContiguous()) {
    return Invalid(n, "a quantized source needs contiguous rows");
  }
  return Contiguous(a.type, a.ne);
}

absl::StatusOr<NodeLayout> ViewRule(const Tensor& n) {
  Tensor* a = n.src[0];
  Tensor* root = Root(a);
  if (n.type != a->type) return Invalid(n, "a view must keep its source's type");
  if (auto s = CheckShape(n.type, n.ne); !s.ok()) return Invalid(n, s.message());
  if (IsQuantized(n.type) && n.nb[0] != BlockBytes(n.type)) {
    return Invalid(n, "a quantized view must keep whole blocks contiguous");
  }
  Tensor probe = n;
  const size_t bytes = probe.NumBytes();
  const size_t root_bytes = root->NumBytes();
  if (n.view_offs > root_bytes || bytes > root_bytes - n.view_offs) {
    return Invalid(n, absl::StrFormat("view of %d bytes at offset %d exceeds its source of %d",
                                      bytes, n.view_offs, root_bytes));
  }
  NodeLayout l;
  l.type = n.type;
  std::copy(n.ne, n.ne + kMaxDims, l.ne);
  std::copy(n.nb, n.nb + kMaxDims, l.nb);
  l.view_src = root;
  l.view_offs = n.view_offs;
  return l;
}

absl::StatusOr<NodeLayout> ReshapeRule(const Tensor& n) {
  Tensor* a = n.src[0];
  if (!a->IsContiguous()) return Invalid(n, absl::StrCat(Shape(*a), " is not contiguous"));
  if (auto s = CheckShape(a->type, n.ne); !s.ok()) return Invalid(n, s.message());
  Tensor probe;
  std::copy(n.ne, n.ne + kMaxDims, probe.ne);
  if (probe.NumElements() != a->NumElements()) {
    return Invalid(n, absl::StrFormat("cannot reshape %s to %dx%dx%dx%d", Shape(*a), n.ne[0],
                                      n.ne[1], n.ne[2], n.ne[3]));
  }
  NodeLayout l = Contiguous(a->type, n.ne);
  l.view_src = Root(a);
  l.view_offs = a->view_src != nullptr ? a->view_offs : 0;
  return l;
}

absl::StatusOr<NodeLayout> PermuteRule(const Tensor& n) {
  Tensor* a = n.src[0];
  bool seen[kMaxDims] = {};
  for (int i = 0; i < kMaxDims; ++i) {
    const int32_t ax = n.op_params[i];
    if (ax < 0 || ax >= kMaxDims || seen[ax]) {
      return Invalid(n, absl::StrFormat("axes %d,%d,%d,%d are not a permutation of 0..3",
                                        n.op_params[0], n.op_params[1], n.op_params[2],
                                        n.op_params[3]));
    }
    seen[ax] = true;
  }
  if (IsQuantized(a->type) && n.op_params[0] != 0) {
    return Invalid(n, "cannot move the row axis of a quantized tensor");
  }
  NodeLayout l = AliasOf(a);
  for (int i = 0; i < kMaxDims; ++i) {
    l.ne[n.op_params[i]] = a->ne[i];
    l.nb[n.op_params[i]] = a->nb[i];
  }
  return l;
}

absl::StatusOr<NodeLayout> FlashAttnRule(const Tensor& n) {
  const Tensor& q = *n.src[0];
  const Tensor& k = *n.src[1];
  const Tensor& v = *n.src[2];
  if (auto s = RequireType(n, q, DType::kF32, "q"); !s.ok()) return s;
  for (const Tensor* kv : {&k, &v}) {
    if (kv->type != DType::kF32 && kv->type != DType::kF16) {
      return Invalid(n, absl::StrCat("k/v ", Shape(*kv), " must be f32 or f16"));
    }
    if (auto s = RequireRowsContiguous(n, *kv, "k/v"); !s.ok()) return s;
  }
  if (k.ne[0] != q.ne[0] || v.ne[1] != k.ne[1] || v.ne[2] != k.ne[2] || k.ne[3] != q.ne[3] ||
      v.ne[3] != q.ne[3] || k.ne[2] == 0 || q.ne[2] % k.ne[2] != 0) {
    return Invalid(n, absl::StrCat("q ", Shape(q), ", k ", Shape(k), ", v ", Shape(v),
                                   " do not match (need q [D,n_q,H,B], k [D,n_kv,H_kv,B], "
                                   "v [Dv,n_kv,H_kv,B], H % H_kv == 0)"));
  }
  if (const Tensor* m = n.src[3]; m != nullptr) {
    if (m->type != DType::kF32 && m->type != DType::kF16) {
      return Invalid(n, absl::StrCat("mask ", Shape(*m), " must be f32 or f16"));
    }
    if (m->ne[0] != k.ne[1] || m->ne[1] < q.ne[1] || m->ne[2] != 1 || m->ne[3] != 1) {
      return Invalid(n, absl::StrCat("mask ", Shape(*m), " must be [n_kv, >= n_q, 1, 1]"));
    }
  }
  if (auto s = CheckFinite(n, 0, "scale"); !s.ok()) return s;
  if (n.ParamF32(1) != 0.0f || n.ParamF32(2) != 0.0f) {
    return Invalid(n, "max_bias and logit_softcap are not supported");
  }
  const int64_t ne[4] = {v.ne[0], q.ne[2], q.ne[1], q.ne[3]};
  return Contiguous(DType::kF32, ne);
}

absl::Status CheckSources(const Tensor& node) {
  const Arity arity = OpArity(node.op);
  for (int i = 0; i < kMaxSrc; ++i) {
    if (i < arity.required && node.src[i] == nullptr) {
      return Invalid(node, absl::StrFormat("source %d is missing", i));
    }
    if (i >= arity.total && node.src[i] != nullptr) {
      return Invalid(node, absl::StrFormat("unexpected source %d", i));
    }
  }
  return absl::OkStatus();
}

}  // namespace

Arity OpArity(Op op) {
  switch (op) {
    case Op::kNone: return {0, 0};
    case Op::kGetRows: return {2, 2};
    case Op::kSetRows: return {3, 3};
    case Op::kMulMat: return {2, 2};
    case Op::kMulMatId: return {3, 3};
    case Op::kAdd:
    case Op::kMul:
    case Op::kDiv:
    case Op::kSwiglu:
    case Op::kSwigluOai:
    case Op::kCpy: return {2, 2};
    case Op::kRope: return {3, 2};
    case Op::kSoftMax:
      return {3, 1};
    case Op::kFlashAttn: return {4, 3};
    case Op::kSample: return {3, 2};
    case Op::kScale:
    case Op::kRmsNorm:
    case Op::kSilu:
    case Op::kArgmax:
    case Op::kArgsort:
    case Op::kTopK:
    case Op::kSumRows:
    case Op::kCont:
    case Op::kView:
    case Op::kReshape:
    case Op::kPermute:
    case Op::kTranspose: return {1, 1};
    case Op::kCount: break;
  }
  return {0, 0};
}

absl::StatusOr<NodeLayout> ApplyShapeRule(const Tensor& node) {
  if (static_cast<int>(node.op) >= static_cast<int>(Op::kCount)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown op %d on '%s'", static_cast<int>(node.op), node.name));
  }
  if (auto s = CheckSources(node); !s.ok()) return s;
  switch (node.op) {
    case Op::kNone: {
      if (auto s = CheckShape(node.type, node.ne); !s.ok()) return s;
      return Contiguous(node.type, node.ne);
    }
    case Op::kGetRows: return GetRowsRule(node);
    case Op::kSetRows: return SetRowsRule(node);
    case Op::kMulMat: return MulMatRule(node);
    case Op::kMulMatId: return MulMatIdRule(node);
    case Op::kAdd:
    case Op::kMul:
    case Op::kDiv: return BinaryRule(node);
    case Op::kScale: return ScaleRule(node);
    case Op::kRmsNorm: return RmsNormRule(node);
    case Op::kRope: return RopeRule(node);
    case Op::kSoftMax: return SoftMaxRule(node);
    case Op::kSilu: return UnaryF32Rule(node);
    case Op::kSwiglu: return SwigluRule(node);
    case Op::kSwigluOai: return SwigluOaiRule(node);
    case Op::kCpy: return CpyRule(node);
    case Op::kCont: return ContRule(node);
    case Op::kView: return ViewRule(node);
    case Op::kReshape: return ReshapeRule(node);
    case Op::kPermute:
    case Op::kTranspose: return PermuteRule(node);
    case Op::kFlashAttn: return FlashAttnRule(node);
    case Op::kArgmax: return ArgmaxRule(node);
    case Op::kSample: return SampleRule(node);
    case Op::kArgsort: return ArgsortRule(node);
    case Op::kTopK: return TopKRule(node);
    case Op::kSumRows: return SumRowsRule(node);
    case Op::kCount: break;
  }
  return absl::InternalError("unreachable: op checked above");
}

absl::Status ValidateNode(const Tensor& node) {
  absl::StatusOr<NodeLayout> layout = ApplyShapeRule(node);
  if (!layout.ok()) return layout.status();
  const bool same = layout->type == node.type &&
                    std::equal(node.ne, node.ne + kMaxDims, layout->ne) &&
                    std::equal(node.nb, node.nb + kMaxDims, layout->nb) &&
                    layout->view_src == node.view_src && layout->view_offs == node.view_offs;
  if (!same) {
    return Invalid(node, absl::StrCat("result ", Shape(node),
                                      " does not match its op's rule (expected type ",
                                      DTypeName(layout->type), ", shape ", layout->ne[0], "x",
                                      layout->ne[1], "x", layout->ne[2], "x", layout->ne[3], ")"));
  }
  return absl::OkStatus();
}

}  // namespace tg
