#include "meta/state_deriver.h"

#include <optional>

#include "core/status_macros.h"
#include "meta/split_rules.h"
#include "meta/view_split.h"

namespace tg::meta {
absl::Status StateDeriver::Derive(Tensor* node, Placement* out) {
  if (!IsViewOp(node->op)) return DeriveCompute(node, out);
  placements_.Of(node->src[0]).aliased = true;
  placements_.Of(ViewRoot(node)).aliased = true;
  if (node->op == Op::kReshape) return DeriveReshape(node, out);
  if (node->op == Op::kView) return DeriveView(node, out);
  const Placement& sp = placements_.Of(node->src[0]);
  out->state = PermuteSplit(sp.state, node->op_params);
  out->detached = sp.detached;
  TG_ASSIGN_OR_RETURN(out->shadows, shadows_.Permute(*node, sp.shadows));
  return absl::OkStatus();
}

absl::Status StateDeriver::DeriveCompute(Tensor* node, Placement* out) {
  const int dest = WriteDestination(node->op);
  if (dest >= 0 && placements_.Of(node->src[dest]).detached) {
    return absl::FailedPreconditionError(
        "its destination is a gathered copy (the split cannot be viewed that way)");
  }
  // Converting one source can change another that is the same tensor (an in-place
  // all-reduce), so derive again until the states the rule saw are the ones used.
  for (int attempt = 0; attempt < kMaxSrc + 1; ++attempt) {
    const SplitState* states[kMaxSrc] = {};
    int seen[kMaxSrc] = {};
    for (int i = 0; i < kMaxSrc; ++i) {
      if (node->src[i] == nullptr) continue;
      const Placement& p = placements_.Of(node->src[i]);
      states[i] = &p.state;
      seen[i] = p.version;
    }
    TG_ASSIGN_OR_RETURN(OpSplit split, DeriveOpSplit(*node, states));
    const Placement* srcs[kMaxSrc] = {};
    for (int i = 0; i < kMaxSrc; ++i) {
      if (node->src[i] != nullptr && split.src[i].has_value()) {
        TG_ASSIGN_OR_RETURN(srcs[i], converter_.Convert(node->src[i], *split.src[i]));
      }
    }
    bool stable = true;
    for (int i = 0; i < kMaxSrc; ++i) {
      if (node->src[i] == nullptr || split.src[i].has_value()) continue;
      srcs[i] = &placements_.Of(node->src[i]);
      stable = stable && srcs[i]->version == seen[i];
    }
    if (!stable) continue;
    out->state = split.result;
    out->detached = dest >= 0 && srcs[dest]->detached;
    const ShadowList* lists[kMaxSrc] = {};
    for (int i = 0; i < kMaxSrc; ++i) lists[i] = srcs[i] != nullptr ? &srcs[i]->shadows : nullptr;
    TG_ASSIGN_OR_RETURN(out->shadows, shadows_.Node(*node, out->state, lists));
    return absl::OkStatus();
  }
  return absl::InternalError("split states of the sources do not settle");
}

absl::Status StateDeriver::DeriveReshape(Tensor* node, Placement* out) {
  Tensor* src = node->src[0];
  const Placement* sp = &placements_.Of(src);
  out->state = sp->state;
  if (sp->state.is_axis()) {
    std::optional<SplitState> mapped = MapReshapeSplit(src->ne, sp->state, node->ne);
    if (mapped.has_value()) {
      out->state = *mapped;
    } else {
      TG_ASSIGN_OR_RETURN(sp, converter_.Convert(src, SplitState::Mirrored()));
      out->state = sp->state;
    }
  }
  bool packed = false;
  TG_ASSIGN_OR_RETURN(out->shadows, shadows_.Reshape(*node, out->state, sp->shadows, &packed));
  out->detached = sp->detached || packed;
  return absl::OkStatus();
}

absl::Status StateDeriver::DeriveView(Tensor* node, Placement* out) {
  Tensor* root = ViewRoot(node);
  const Placement& sp = placements_.Of(node->src[0]);
  const Placement* rp = &placements_.Of(root);
  std::optional<ViewSplit> mapped;
  if (rp->state.is_axis()) {
    mapped = MapViewSplit(*root, rp->state, *node);
    if (!mapped.has_value()) {
      TG_ASSIGN_OR_RETURN(rp, converter_.Convert(root, SplitState::Mirrored()));
    }
  }
  out->state = mapped.has_value() ? mapped->state : rp->state;
  out->detached = rp->detached;
  const ViewSplit* slices = mapped.has_value() ? &*mapped : nullptr;
  TG_ASSIGN_OR_RETURN(out->shadows, shadows_.View(*node, slices, rp->shadows, sp.shadows));
  return absl::OkStatus();
}

}  // namespace tg::meta
