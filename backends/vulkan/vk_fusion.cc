#include "backends/vulkan/vk_fusion.h"

#include <initializer_list>

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

// RMS_NORM n, then MUL m of its result by the norm's weight row; the MUL's result must not
// take the place of the norm's input, which the kernel reads after writing it.
bool IsNormMul(const Tensor* n, const Tensor* m, const RangeOf& range_of) {
  return n->op == Op::kRmsNorm && m != nullptr && m->op == Op::kMul && m->src[0] == n &&
         IsWeightRowFor(m->src[1], n) && n->IsContiguous() && m->IsContiguous() &&
         !range_of(m).Overlaps(range_of(n->src[0]));
}

// An ADD of two f32 tensors of its own shape and layout (no broadcast), all contiguous: the
// norm's kernel reads both at the same offsets.
bool IsPlainSum(const Tensor* t) {
  if (t->op != Op::kAdd || t->type != DType::kF32 || !t->IsContiguous()) return false;
  for (const Tensor* s : {t->src[0], t->src[1]}) {
    if (s->type != DType::kF32 || !s->IsContiguous() || !SameShape(*s, *t)) return false;
  }
  return true;
}

// No tensor of `written` overlaps one of `read` but in place (the same bytes): rms_norm.comp
// reads and writes element k of a row in the same invocation, reads before writes, and a
// plain sum, its norm and the MUL after it share one layout, so in place is safe; a partial
// overlap would let one workgroup write what another has still to read.
bool OverlapOnlyInPlace(std::initializer_list<const Tensor*> written,
                        std::initializer_list<const Tensor*> read, const RangeOf& range_of) {
  for (const Tensor* w : written) {
    for (const Tensor* r : read) {
      const AddressRange wr = range_of(w), rr = range_of(r);
      if (wr.Overlaps(rr) && (wr.begin != rr.begin || wr.end != rr.end)) return false;
    }
  }
  return true;
}

// The MUL_MAT `p` multiplies `result` (the node the norm's kernel may prepare it for).
const Tensor* ProductOf(const Tensor* p, const Tensor* result) {
  return p != nullptr && p->op == Op::kMulMat && p->src[1] == result ? p : nullptr;
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
    const Tensor* fourth = i + 3 < work.size() ? work[i + 3] : nullptr;
    if (IsPlainSum(n) && next != nullptr && next->src[0] == n && IsNormMul(next, third, range_of) &&
        OverlapOnlyInPlace({n, next, third}, {n->src[0], n->src[1]}, range_of)) {
      groups.push_back({FusionKind::kAddRmsNormMul, {n, next, third}, ProductOf(fourth, third)});
      i += 3;
      continue;
    }
    if (IsNormMul(n, next, range_of)) {
      groups.push_back({FusionKind::kRmsNormMul, {n, next}, ProductOf(third, next)});
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
