#include "meta/shadow_builder.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "core/shape_rules.h"
#include "core/status_macros.h"
#include "meta/split_rules.h"

namespace tg::meta {
namespace {

constexpr uint32_t kIoFlags = kFlagInput | kFlagOutput;

}  // namespace

// "name#d": which device's shadow of which tensor (errors and dumps name them). A replay
// keeps the names its recording gave.
void ShadowBuilder::Name(const Tensor& t, int d, Tensor* s) const {
  if (tape_.replaying() || t.name[0] == '\0') return;
  std::snprintf(s->name, kMaxName, "%.52s#%d", t.name, d);
}

absl::StatusOr<Tensor*> ShadowBuilder::Emitted(int d, absl::StatusOr<Tensor*> t) {
  if (t.ok()) emitter_.Emit(d, *t);
  return t;
}

absl::StatusOr<ShadowList> ShadowBuilder::Blank(const Tensor& t, const SplitState& state) {
  ShadowList shadows = None();
  for (int d = 0; d < n_; ++d) {
    if (state.Empty(d)) continue;
    int64_t ne[kMaxDims];
    ShadowShape(t, state, d, ne);
    TG_ASSIGN_OR_RETURN(Tensor * s, tape_.NewBlank(t.type, ne));
    PlanTape::SetFlags(s, t.flags & kIoFlags);
    Name(t, d, s);
    shadows[d] = s;
  }
  return shadows;
}

absl::StatusOr<ShadowList> ShadowBuilder::Node(const Tensor& node, const SplitState& state,
                                               const ShadowList* const srcs[kMaxSrc]) {
  ShadowList out = None();
  for (int d = 0; d < n_; ++d) {
    if (state.Empty(d)) continue;
    Tensor* args[kMaxSrc] = {};
    for (int i = 0; i < kMaxSrc; ++i) args[i] = srcs[i] != nullptr ? (*srcs[i])[d] : nullptr;
    TG_ASSIGN_OR_RETURN(out[d], NodeOn(node, state, d, args));
  }
  return out;
}

absl::StatusOr<Tensor*> ShadowBuilder::NodeOn(const Tensor& node, const SplitState& state, int d,
                                              Tensor* args[kMaxSrc]) {
  int missing = 0;
  int present = 0;
  for (int i = 0; i < kMaxSrc; ++i) {
    if (node.src[i] == nullptr) continue;
    (args[i] == nullptr ? missing : present) += 1;
  }
  if (missing > 0) {
    // A device that holds nothing of a factor contributes nothing to a partial sum.
    if (!state.is_partial()) {
      return absl::InternalError(
          absl::StrCat("device ", d, " lacks a source of a ", state.ToString(), " result"));
    }
    if (node.op != Op::kAdd || present == 0) return nullptr;
    const int gap = args[0] == nullptr ? 0 : 1;
    TG_ASSIGN_OR_RETURN(args[gap], Zeros(d, DType::kF32, node.src[gap]->ne));
  }
  const absl::Span<Tensor* const> sources(args, OpArity(node.op).total);
  int32_t op_params[kMaxOpParams];
  std::copy(node.op_params, node.op_params + kMaxOpParams, op_params);
  if (node.op == Op::kMulMatId && state.by_experts()) {
    // This device holds experts [begin, end) of the node's weights as its 0, 1, ... (the
    // node may itself hold a range of the ids' experts).
    op_params[kMulMatIdFirstExpert] += static_cast<int32_t>(state.range(d).begin);
    op_params[kMulMatIdExpertCount] = static_cast<int32_t>(state.range(d).size());
  }
  const absl::Span<const int32_t> params(op_params, kMaxOpParams);
  absl::StatusOr<Tensor*> made = tape_.NewNode(node.op, sources, params);
  if (!made.ok() && !tape_.mismatch()) {
    // Slices of whole tensors are strided views; some ops want them packed. (A rule that
    // fails takes nothing from a replay's tape, so a replay retries the same way.)
    const int dest = WriteDestination(node.op);
    for (int i = 0; i < kMaxSrc; ++i) {
      if (args[i] != nullptr && i != dest && !args[i]->IsContiguous()) {
        TG_ASSIGN_OR_RETURN(args[i], Contiguous(d, args[i]));
      }
    }
    made = tape_.NewNode(node.op, sources, params);
  }
  TG_ASSIGN_OR_RETURN(Tensor * s, std::move(made));
  return Finish(node, state, d, s);
}

absl::StatusOr<Tensor*> ShadowBuilder::Finish(const Tensor& node, const SplitState& state, int d,
                                              Tensor* s) {
  int64_t want[kMaxDims];
  ShadowShape(node, state, d, want);
  if (!std::equal(want, want + kMaxDims, s->ne)) {
    return absl::InternalError(absl::StrCat("shadow on device ", d, " is ", DescribeTensor(*s),
                                            ", split ", state.ToString(), " needs ", want[0], "x",
                                            want[1], "x", want[2], "x", want[3]));
  }
  PlanTape::SetFlags(s, node.flags & kIoFlags);
  Name(node, d, s);
  emitter_.Emit(d, s);
  return s;
}

absl::StatusOr<ShadowList> ShadowBuilder::Permute(const Tensor& node, const ShadowList& src) {
  ShadowList out = None();
  const absl::Span<const int32_t> axes(node.op_params, kMaxDims);
  for (int d = 0; d < n_; ++d) {
    if (src[d] == nullptr) continue;
    Tensor* const in[1] = {src[d]};
    TG_ASSIGN_OR_RETURN(out[d], Emitted(d, tape_.NewNode(node.op, in, axes)));
  }
  return out;
}

absl::StatusOr<ShadowList> ShadowBuilder::Reshape(const Tensor& node, const SplitState& state,
                                                  const ShadowList& src, bool* packed) {
  ShadowList out = None();
  for (int d = 0; d < n_; ++d) {
    Tensor* s = src[d];
    if (state.Empty(d) || s == nullptr) continue;
    if (!s->IsContiguous()) {
      TG_ASSIGN_OR_RETURN(s, Contiguous(d, s));
      *packed = true;
    }
    int64_t ne[kMaxDims];
    ShadowShape(node, state, d, ne);
    TG_ASSIGN_OR_RETURN(out[d], Emitted(d, tape_.NewReshape(s, ne)));
  }
  return out;
}

absl::StatusOr<ShadowList> ShadowBuilder::View(const Tensor& node, const ViewSplit* mapped,
                                               const ShadowList& root, const ShadowList& src) {
  ShadowList out = None();
  for (int d = 0; d < n_; ++d) {
    Tensor* root_d = root[d];
    if (root_d == nullptr || (mapped != nullptr && mapped->slices[d].empty)) continue;
    const int64_t* ne = mapped != nullptr ? mapped->slices[d].ne : node.ne;
    const size_t* nb = mapped != nullptr ? mapped->slices[d].nb : node.nb;
    const size_t offset = mapped != nullptr ? mapped->slices[d].offset : node.view_offs;
    Tensor* base = root_d;
    Tensor* s = src[d];
    if (s != nullptr && ViewRoot(s) == root_d &&
        (s->view_src == nullptr || s->view_offs <= offset)) {
      base = s;
    }
    const size_t base_offs = base->view_src != nullptr ? base->view_offs : 0;
    TG_ASSIGN_OR_RETURN(out[d], Emitted(d, tape_.NewView(base, ne, nb, offset - base_offs)));
  }
  return out;
}

absl::StatusOr<ShadowList> ShadowBuilder::Slice(const SplitState& target, const ShadowList& whole) {
  const int k = target.axis();
  ShadowList out = None();
  for (int d = 0; d < n_; ++d) {
    Tensor* w = whole[d];
    if (target.Count(d) == 0 || w == nullptr) continue;
    int64_t ne[kMaxDims];
    std::copy(w->ne, w->ne + kMaxDims, ne);
    ne[k] = target.Count(d);
    const int64_t begin = target.range(d).begin;
    const size_t offset = k == 0 ? RowBytes(w->type, begin) : begin * w->nb[k];
    TG_ASSIGN_OR_RETURN(out[d], Emitted(d, tape_.NewView(w, ne, w->nb, offset)));
  }
  return out;
}

absl::StatusOr<Tensor*> ShadowBuilder::Private(int d, DType type, const int64_t ne[kMaxDims]) {
  TG_ASSIGN_OR_RETURN(Tensor * t, tape_.NewBlank(type, ne));
  emitter_.AddPrivate(d, t);
  return t;
}

absl::StatusOr<Tensor*> ShadowBuilder::Zeros(int d, DType type, const int64_t ne[kMaxDims]) {
  TG_ASSIGN_OR_RETURN(Tensor * t, tape_.NewBlank(type, ne));
  emitter_.AddZeros(d, t);
  return t;
}

absl::StatusOr<Tensor*> ShadowBuilder::Contiguous(int d, Tensor* s) {
  if (s->IsContiguous()) return s;
  Tensor* const in[1] = {s};
  TG_ASSIGN_OR_RETURN(Tensor * c, tape_.NewNode(Op::kCont, in, {}));
  emitter_.AddPrivate(d, c);
  emitter_.Emit(d, c);
  return c;
}

absl::Status ShadowBuilder::Copy(int d, Tensor* src, Tensor* dst) {
  Tensor* const in[2] = {src, dst};
  return Emitted(d, tape_.NewNode(Op::kCpy, in, {})).status();
}

}  // namespace tg::meta
