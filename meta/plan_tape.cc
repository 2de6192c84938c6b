#include "meta/plan_tape.h"

#include <algorithm>

#include "core/shape_rules.h"
#include "core/status_macros.h"

namespace tg::meta {
namespace {

// Marks, during a replay, a tape tensor whose layout changed: tensors made from unchanged
// sources with unchanged arguments keep theirs without running the shape rule again. (A bit
// no core flag uses, set only on the tape's own tensors.)
constexpr uint32_t kFlagReshaped = 1u << 31;

bool SameLayout(const Tensor& t, const NodeLayout& l) {
  return t.type == l.type && std::equal(t.ne, t.ne + kMaxDims, l.ne) &&
         std::equal(t.nb, t.nb + kMaxDims, l.nb) && t.view_src == l.view_src &&
         t.view_offs == l.view_offs;
}

bool SameSources(const Tensor& t, const Tensor& proto) {
  return t.op == proto.op && std::equal(t.src, t.src + kMaxSrc, proto.src);
}

}  // namespace

void PlanTape::Begin(bool replay) {
  for (Tensor* t : reshaped_) t->flags &= ~kFlagReshaped;
  reshaped_.clear();
  pos_ = 0;
  replay_ = replay;
  mismatch_ = false;
}

absl::Status PlanTape::End() {
  if (replay_ && pos_ != tensors_.size()) return Mismatch();
  return absl::OkStatus();
}

void PlanTape::SetFlags(Tensor* t, uint32_t flags) {
  t->flags = (t->flags & kFlagReshaped) | (flags & ~kFlagReshaped);
}

absl::Status PlanTape::Mismatch() {
  mismatch_ = true;
  return absl::AbortedError("the graph's structure differs from the plan's");
}

absl::StatusOr<Tensor*> PlanTape::Next() {
  if (pos_ >= tensors_.size()) return Mismatch();
  return tensors_[pos_++];
}

Tensor* PlanTape::Append() {
  Tensor* t = ctx_.NewBlank();
  tensors_.push_back(t);
  return t;
}

void PlanTape::MarkReshaped(Tensor* t) {
  t->flags |= kFlagReshaped;
  reshaped_.push_back(t);
}

absl::StatusOr<Tensor*> PlanTape::NewBlank(DType type, const int64_t ne[kMaxDims]) {
  Tensor* t;
  if (replay_) {
    TG_ASSIGN_OR_RETURN(t, Next());
    if (t->op != Op::kNone) return Mismatch();
    if (t->type == type && std::equal(ne, ne + kMaxDims, t->ne)) return t;
    MarkReshaped(t);
  } else {
    t = Append();
  }
  t->type = type;
  std::copy(ne, ne + kMaxDims, t->ne);
  SetContiguousStrides(t);
  return t;
}

bool PlanTape::Unchanged(const Tensor& t, const Tensor& proto) const {
  for (const Tensor* s : proto.src) {
    if (s != nullptr && (s->flags & kFlagReshaped) != 0) return false;
  }
  if (!std::equal(proto.op_params, proto.op_params + kMaxOpParams, t.op_params)) return false;
  // VIEW and RESHAPE take their shape from the caller rather than from their sources.
  if (proto.op != Op::kView && proto.op != Op::kReshape) return true;
  if (!std::equal(proto.ne, proto.ne + kMaxDims, t.ne)) return false;
  return proto.op != Op::kView ||
         (std::equal(proto.nb, proto.nb + kMaxDims, t.nb) && proto.view_offs == t.view_offs);
}

absl::StatusOr<Tensor*> PlanTape::Materialize(const Tensor& proto) {
  if (replay_ && pos_ < tensors_.size()) {
    Tensor* t = tensors_[pos_];
    if (SameSources(*t, proto) && Unchanged(*t, proto)) {
      ++pos_;
      return t;
    }
  }
  TG_ASSIGN_OR_RETURN(NodeLayout layout, ApplyShapeRule(proto));
  Tensor* t;
  if (replay_) {
    TG_ASSIGN_OR_RETURN(t, Next());
    if (!SameSources(*t, proto)) return Mismatch();
    if (!SameLayout(*t, layout)) MarkReshaped(t);
  } else {
    t = Append();
  }
  t->op = proto.op;
  std::copy(proto.op_params, proto.op_params + kMaxOpParams, t->op_params);
  std::copy(proto.src, proto.src + kMaxSrc, t->src);
  t->type = layout.type;
  std::copy(layout.ne, layout.ne + kMaxDims, t->ne);
  std::copy(layout.nb, layout.nb + kMaxDims, t->nb);
  t->view_src = layout.view_src;
  t->view_offs = layout.view_offs;
  return t;
}

absl::StatusOr<Tensor*> PlanTape::NewNode(Op op, absl::Span<Tensor* const> src,
                                          absl::Span<const int32_t> params) {
  Tensor proto;
  proto.op = op;
  for (size_t i = 0; i < src.size() && i < kMaxSrc; ++i) proto.src[i] = src[i];
  for (size_t i = 0; i < params.size() && i < kMaxOpParams; ++i) proto.op_params[i] = params[i];
  if (!src.empty() && src[0] != nullptr) proto.type = src[0]->type;
  return Materialize(proto);
}

absl::StatusOr<Tensor*> PlanTape::NewView(Tensor* base, const int64_t ne[kMaxDims],
                                          const size_t nb[kMaxDims], size_t offset) {
  Tensor proto;
  proto.op = Op::kView;
  proto.src[0] = base;
  proto.type = base->type;
  std::copy(ne, ne + kMaxDims, proto.ne);
  std::copy(nb, nb + kMaxDims, proto.nb);
  proto.nb[0] = BlockBytes(base->type);
  proto.view_offs = (base->view_src != nullptr ? base->view_offs : 0) + offset;
  return Materialize(proto);
}

absl::StatusOr<Tensor*> PlanTape::NewReshape(Tensor* src, const int64_t ne[kMaxDims]) {
  Tensor proto;
  proto.op = Op::kReshape;
  proto.src[0] = src;
  proto.type = src->type;
  std::copy(ne, ne + kMaxDims, proto.ne);
  return Materialize(proto);
}

}  // namespace tg::meta
