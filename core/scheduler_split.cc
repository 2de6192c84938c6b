#include "core/scheduler_split.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace tg {
namespace {

// True when a node on device `d` must read `src` (assigned elsewhere) through a copy: a
// result computed on another device always (devices do not share compute memory), a leaf
// when d cannot use the memory it lives in.
bool NeedsCopy(const Tensor& src, int d, absl::Span<Device* const> devices,
               const DeviceAssignment& a) {
  if (src.op != Op::kNone) return true;
  const Tensor* owner = MemoryOwner(&src);
  const BufferType* type = owner->buffer != nullptr ? owner->buffer->type()
                                                    : devices[a.Get(owner)]->default_buffer_type();
  return !devices[d]->SupportsBufferType(type);
}

Tensor* NewCopy(Context& ctx, const Tensor& src, const Device& device) {
  Tensor* copy = ctx.NewBlank();
  copy->type = src.type;
  std::copy(src.ne, src.ne + kMaxDims, copy->ne);
  std::copy(src.nb, src.nb + kMaxDims, copy->nb);  // same layout: a plain byte copy.
  copy->SetName(absl::StrCat(device.name(), "#", src.Name()));
  return copy;
}

// The split graph's leafs: everything its nodes read (or alias) that the split does not
// compute, with the copies in place of the originals.
void CollectSplitLeafs(Split& split, const SplitPlan& plan, size_t first_rewire) {
  absl::flat_hash_set<const Tensor*> inside(split.graph.nodes.begin(), split.graph.nodes.end());
  absl::flat_hash_set<const Tensor*> seen;
  absl::flat_hash_map<std::pair<const Tensor*, int>, Tensor*> rewired;
  for (size_t r = first_rewire; r < plan.rewires.size(); ++r) {
    rewired[{plan.rewires[r].node, plan.rewires[r].index}] = plan.rewires[r].copy;
  }
  auto add = [&](Tensor* t) {
    if (t != nullptr && !inside.contains(t) && seen.insert(t).second)
      split.graph.leafs.push_back(t);
  };
  for (Tensor* node : split.graph.nodes) {
    for (int j = 0; j < kMaxSrc; ++j) {
      auto it = rewired.find({node, j});
      add(it != rewired.end() ? it->second : node->src[j]);
    }
    add(node->view_src);
  }
}

}  // namespace

void SplitPlan::ApplyRewires() const {
  for (const SourceRewire& r : rewires) r.node->src[r.index] = r.copy;
}

void SplitPlan::RestoreRewires() const {
  for (const SourceRewire& r : rewires) r.node->src[r.index] = r.original;
}

absl::StatusOr<SplitPlan> CutSplits(const Graph& graph, absl::Span<Device* const> devices,
                                    DeviceAssignment& a, Context& ctx) {
  SplitPlan plan;
  if (graph.nodes.empty()) return plan;
  // Views compute nothing: they join whichever split they fall in (as in ggml), so the first
  // split starts at node 0 on the device of the first computed node.
  int first = -1;
  for (const Tensor* node : graph.nodes) {
    if (!IsViewOp(node->op)) {
      first = a.Get(node);
      break;
    }
  }
  plan.splits.push_back(Split{first < 0 ? a.Get(graph.nodes[0]) : first, 0, 0, {}, {}});
  size_t first_rewire = 0;
  absl::flat_hash_map<const Tensor*, Tensor*> copies;  // of the current split.
  auto close = [&](size_t end) {
    Split& s = plan.splits.back();
    s.end = end;
    s.graph.nodes.assign(graph.nodes.begin() + s.begin, graph.nodes.begin() + end);
    // A view of memory on another device (an input's row that a pick reads here) is read
    // through its copy: left in, it would make that memory a leaf of this split, which a
    // device that holds only its own memory (a remote one) refuses.
    std::erase_if(s.graph.nodes,
                  [&](const Tensor* n) { return IsViewOp(n->op) && a.Get(n) != s.device; });
    CollectSplitLeafs(s, plan, first_rewire);
    first_rewire = plan.rewires.size();
    copies.clear();
  };
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    Tensor* node = graph.nodes[i];
    if (IsViewOp(node->op)) continue;
    const int d = a.Get(node);
    if (d != plan.splits.back().device) {
      close(i);
      plan.splits.push_back(Split{d, i, 0, {}, {}});
    }
    for (int j = 0; j < kMaxSrc; ++j) {
      Tensor* src = node->src[j];
      if (src == nullptr || a.Get(src) == d || !NeedsCopy(*src, d, devices, a)) continue;
      Tensor*& copy = copies[src];
      if (copy == nullptr) {
        copy = NewCopy(ctx, *src, *devices[d]);
        a.Set(copy, d);
        plan.splits.back().inputs.push_back({src, copy});
      }
      plan.rewires.push_back({node, j, src, copy});
    }
  }
  close(graph.nodes.size());
  return plan;
}

}  // namespace tg
