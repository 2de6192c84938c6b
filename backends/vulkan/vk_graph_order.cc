#include "backends/vulkan/vk_graph_order.h"

#include <algorithm>

namespace tg::vulkan {
namespace {

// What a node reads and writes. Views compute nothing and write nothing.
struct Access {
  Tensor* node;
  std::vector<AddressRange> reads;
  std::vector<AddressRange> writes;
};

bool Computes(const Tensor* t) {
  return !IsViewOp(t->op) && t->op != Op::kNone && t->NumElements() > 0;
}

Access AccessOf(Tensor* node, const RangeOf& range_of) {
  Access a{node, {}, {}};
  if (!Computes(node)) return a;
  for (const Tensor* s : node->src) {
    if (s != nullptr) a.reads.push_back(range_of(s));
  }
  a.writes.push_back(range_of(node));
  return a;
}

bool Overlap(const std::vector<AddressRange>& x, const std::vector<AddressRange>& y) {
  for (const AddressRange& a : x) {
    for (const AddressRange& b : y) {
      if (a.Overlaps(b)) return true;
    }
  }
  return false;
}

// True when `later` must stay after `earlier`.
bool MustFollow(const Access& later, const Access& earlier) {
  for (const Tensor* s : later.node->src) {
    if (s == earlier.node) return true;
  }
  if (later.node->view_src == earlier.node) return true;
  return Overlap(later.reads, earlier.writes) || Overlap(later.writes, earlier.reads) ||
         Overlap(later.writes, earlier.writes);
}

// The interval of kernels since the last barrier.
struct Interval {
  std::vector<AddressRange> reads, writes;
  bool Conflicts(const Access& a) const {
    return Overlap(a.reads, writes) || Overlap(a.writes, writes) || Overlap(a.writes, reads);
  }
  void Add(const Access& a) {
    reads.insert(reads.end(), a.reads.begin(), a.reads.end());
    writes.insert(writes.end(), a.writes.begin(), a.writes.end());
  }
  void Clear() {
    reads.clear();
    writes.clear();
  }
};

}  // namespace

std::vector<Tensor*> OrderForFewerBarriers(absl::Span<Tensor* const> nodes,
                                           const RangeOf& range_of) {
  std::vector<Access> remaining;
  remaining.reserve(nodes.size());
  for (Tensor* n : nodes) remaining.push_back(AccessOf(n, range_of));
  std::vector<Tensor*> out;
  out.reserve(nodes.size());
  Interval interval;
  while (!remaining.empty()) {
    size_t pick = 0;
    bool fits = false;
    const size_t window = std::min<size_t>(remaining.size(), kReorderWindow);
    for (size_t i = 0; i < window && !fits; ++i) {
      if (interval.Conflicts(remaining[i])) continue;
      bool movable = true;
      for (size_t j = 0; j < i && movable; ++j) movable = !MustFollow(remaining[i], remaining[j]);
      if (movable) {
        pick = i;
        fits = true;
      }
    }
    if (!fits) interval.Clear();  // remaining[0] starts a new interval.
    interval.Add(remaining[pick]);
    out.push_back(remaining[pick].node);
    remaining.erase(remaining.begin() + static_cast<std::ptrdiff_t>(pick));
  }
  return out;
}

int CountBarriers(absl::Span<Tensor* const> nodes, const RangeOf& range_of) {
  Interval interval;
  int barriers = 0;
  for (Tensor* n : nodes) {
    const Access a = AccessOf(n, range_of);
    if (interval.Conflicts(a)) {
      ++barriers;
      interval.Clear();
    }
    interval.Add(a);
  }
  return barriers;
}

}  // namespace tg::vulkan
