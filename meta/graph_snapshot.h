// GraphSnapshot: every field of every tensor of a graph as a partition last derived its plan
// from them, so that the same graph computed again unchanged (the executor reuses a decode
// step's graph for every step of a KV block, only its inputs' bytes differ) runs its plan
// without replaying the derivation. Any difference in any tensor (a shape, a parameter, a
// source, memory) is a mismatch: the caller replays as before. Not thread-safe.
#ifndef TENSORGRID_META_GRAPH_SNAPSHOT_H_
#define TENSORGRID_META_GRAPH_SNAPSHOT_H_

#include <vector>

#include "core/graph.h"
#include "core/tensor.h"

namespace tg::meta {

class GraphSnapshot {
 public:
  // Records graph's leafs and nodes: their addresses and a copy of each.
  void Take(const Graph& graph);
  // True when graph has the recorded tensors, in order, each with every field as recorded.
  bool Matches(const Graph& graph) const;
  void Clear();

 private:
  std::vector<const Tensor*> tensors_;  // leafs, then nodes.
  std::vector<Tensor> copies_;
  size_t n_leafs_ = 0;
};

}  // namespace tg::meta

#endif  // TENSORGRID_META_GRAPH_SNAPSHOT_H_
