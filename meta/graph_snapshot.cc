#include "meta/graph_snapshot.h"

#include <algorithm>
#include <cstring>

namespace tg::meta {
namespace {

// Field by field (a Tensor's padding bytes are not its value).
bool SameFields(const Tensor& a, const Tensor& b) {
  return a.type == b.type && std::equal(a.ne, a.ne + kMaxDims, b.ne) &&
         std::equal(a.nb, a.nb + kMaxDims, b.nb) && a.op == b.op &&
         std::equal(a.op_params, a.op_params + kMaxOpParams, b.op_params) &&
         std::equal(a.src, a.src + kMaxSrc, b.src) && a.view_src == b.view_src &&
         a.view_offs == b.view_offs && a.buffer == b.buffer && a.data == b.data &&
         a.flags == b.flags && std::strncmp(a.name, b.name, kMaxName) == 0;
}

}  // namespace

void GraphSnapshot::Take(const Graph& graph) {
  Clear();
  n_leafs_ = graph.leafs.size();
  for (const auto* list : {&graph.leafs, &graph.nodes}) {
    for (const Tensor* t : *list) {
      tensors_.push_back(t);
      copies_.push_back(*t);
    }
  }
}

bool GraphSnapshot::Matches(const Graph& graph) const {
  if (tensors_.empty() || graph.leafs.size() != n_leafs_ ||
      graph.leafs.size() + graph.nodes.size() != tensors_.size()) {
    return false;
  }
  size_t i = 0;
  for (const auto* list : {&graph.leafs, &graph.nodes}) {
    for (const Tensor* t : *list) {
      if (t != tensors_[i] || !SameFields(*t, copies_[i])) return false;
      ++i;
    }
  }
  return true;
}

void GraphSnapshot::Clear() {
  tensors_.clear();
  copies_.clear();
  n_leafs_ = 0;
}

}  // namespace tg::meta
