#include "backends/vulkan/vk_fusion.h"

#include "backends/vulkan/vk_ops.h"

namespace tg::vulkan {
namespace {

bool Computes(const Tensor* t) {
  return !IsViewOp(t->op) && t->op != Op::kNone && t->NumElements() > 0;
}

bool IsWeightRowFor(const Tensor* w, const Tensor* norm) {
  return w->type == DType::kF32 && w->ne[0] == norm->ne[0] && w->NumElements() == w->ne[0] &&
         w->nb[0] == sizeof(float);
}

}  // namespace

std::vector<FusedGroup> PlanFusion(absl::Span<Tensor* const> order, const RangeOf& range_of,
                                   int64_t max_product_columns) {
  // The computing nodes in order; views record nothing.
  std::vector<const Tensor*> work;
  for (const Tensor* n : order) {
    if (Computes(n)) work.push_back(n);
  }
  std::vector<FusedGroup> groups;
  for (size_t i = 0; i < work.size();) {
    const Tensor* n = work[i];
    const Tensor* next = i + 1 < work.size() ? work[i + 1] : nullptr;
    const Tensor* third = i + 2 < work.size() ? work[i + 2] : nullptr;
    if (n->op == Op::kRmsNorm && next != nullptr && next->op == Op::kMul && next->src[0] == n &&
        IsWeightRowFor(next->src[1], n) && n->IsContiguous() && next->IsContiguous() &&
        !range_of(next).Overlaps(range_of(n->src[0]))) {
      const Tensor* product =
          third != nullptr && third->op == Op::kMulMat && third->src[1] == next ? third : nullptr;
      groups.push_back({FusionKind::kRmsNormMul, {n, next}, product});
      i += 2;
      continue;
    }
    if (next != nullptr && CanMultiplyTogether(*n, *next) &&
        n->src[1]->ne[1] <= max_product_columns) {
      if (third != nullptr && third->op == Op::kSwiglu && third->src[0] == n &&
          third->src[1] == next && n->ne[0] == next->ne[0] && third->IsContiguous() &&
          !range_of(third).Overlaps(range_of(n->src[1]))) {
        groups.push_back({FusionKind::kGateUpSwiglu, {n, next, third}});
        i += 3;
        continue;
      }
      FusedGroup g{FusionKind::kMulMatMulti, {n, next}};
      if (third != nullptr && CanMultiplyTogether(*n, *third)) g.nodes.push_back(third);
      i += g.nodes.size();
      groups.push_back(std::move(g));
      continue;
    }
    groups.push_back({FusionKind::kSingle, {n}});
    ++i;
  }
  return groups;
}

}  // namespace tg::vulkan
