#include "meta/split_converter.h"

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tg::meta {

absl::StatusOr<const Placement*> SplitConverter::Convert(Tensor* t, const SplitState& target) {
  Placement& p = placements_.Of(t);
  if (p.state == target) return &p;
  if (const Placement* c = placements_.Converted(t, target); c != nullptr) return c;
  if (target.is_mirrored()) return p.state.is_partial() ? Reduce(t) : Gather(t);
  if (!target.is_axis()) {
    return absl::InternalError(
        absl::StrCat("cannot turn ", p.state.ToString(), " into ", target.ToString()));
  }
  const Placement* whole = &p;
  if (!p.state.is_mirrored()) {
    TG_ASSIGN_OR_RETURN(whole, Convert(t, SplitState::Mirrored()));
  }
  return Slice(t, *whole, target);
}

absl::StatusOr<const Placement*> SplitConverter::Reduce(Tensor* t) {
  if (t->type != DType::kF32) {
    return absl::UnimplementedError(absl::StrCat("all-reduce of ", DescribeTensor(*t)));
  }
  Placement& p = placements_.Of(t);
  bool in_place = t->view_src == nullptr && !p.aliased && !p.detached;
  for (Tensor* s : p.shadows) in_place = in_place && (s == nullptr || s->IsContiguous());
  const int n = emitter_.n_devices();
  CommOp op;
  op.kind = CommOp::Kind::kAllReduce;
  op.dst.resize(n);
  op.zero_fill.assign(n, false);
  for (int d = 0; d < n; ++d) {
    Tensor* s = p.shadows[d];
    if (s == nullptr) {
      TG_ASSIGN_OR_RETURN(s, shadows_.Private(d, DType::kF32, t->ne));
      op.zero_fill[d] = true;
    } else if (!in_place) {
      // A packed copy: the original must stay partial for whoever reads it as such.
      TG_ASSIGN_OR_RETURN(Tensor * copy, shadows_.Private(d, DType::kF32, t->ne));
      TG_RETURN_IF_ERROR(shadows_.Copy(d, s, copy));
      s = copy;
    }
    op.dst[d] = s;
  }
  ShadowList reduced(op.dst.begin(), op.dst.end());
  emitter_.EmitComm(op);
  if (in_place) {
    p.state = SplitState::Mirrored();
    p.shadows = std::move(reduced);
    ++p.version;
    return &p;
  }
  return placements_.AddConverted(
      t, Placement{SplitState::Mirrored(), std::move(reduced), /*detached=*/true});
}

absl::StatusOr<const Placement*> SplitConverter::Gather(Tensor* t) {
  const Placement& p = placements_.Of(t);
  const int n = emitter_.n_devices();
  CommOp op;
  op.kind = CommOp::Kind::kAllGather;
  op.state = p.state;
  TG_ASSIGN_OR_RETURN(op.full, shadows_.Describe(*t));
  op.src.resize(n);
  op.dst.resize(n);
  for (int d = 0; d < n; ++d) {
    if (p.shadows[d] != nullptr) {
      TG_ASSIGN_OR_RETURN(op.src[d], shadows_.Contiguous(d, p.shadows[d]));
    }
    TG_ASSIGN_OR_RETURN(op.dst[d], shadows_.Private(d, t->type, t->ne));
  }
  ShadowList whole(op.dst.begin(), op.dst.end());
  emitter_.EmitComm(op);
  return placements_.AddConverted(
      t, Placement{SplitState::Mirrored(), std::move(whole), /*detached=*/true});
}

absl::StatusOr<const Placement*> SplitConverter::Slice(Tensor* t, const Placement& whole,
                                                       const SplitState& target) {
  if (target.segmented()) {
    return absl::UnimplementedError(
        absl::StrCat("cutting ", DescribeTensor(*t), " into ", target.ToString()));
  }
  TG_ASSIGN_OR_RETURN(ShadowList sliced, shadows_.Slice(target, whole.shadows));
  return placements_.AddConverted(t, Placement{target, std::move(sliced), whole.detached});
}

}  // namespace tg::meta
