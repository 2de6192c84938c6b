// Graph: the nodes reachable from a set of outputs, in an order where every node follows its
// sources, plus the leafs (op NONE) they read. `uid` identifies the topology (ops, shapes,
// strides, params, wiring; not data), so that a device can cache per-graph work, e.g. the
// RPC server's compiled graphs. Not thread-safe.
#ifndef TENSORGRID_CORE_GRAPH_H_
#define TENSORGRID_CORE_GRAPH_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/tensor.h"

namespace tg {

class Graph {
 public:
  std::vector<Tensor*> nodes;  // op != NONE, topologically ordered.
  std::vector<Tensor*> leafs;  // op == NONE.

  // The topology hash (TopologyUid), computed on first use: local devices never need it,
  // and hashing every node each decode step would cost more than some kernels.
  uint64_t uid() const;

 private:
  mutable uint64_t uid_ = 0;
  mutable bool uid_valid_ = false;
};

// Collects everything `outputs` depend on (sources and view bases). Fails on a cycle or on
// more than max_nodes tensors. Outputs are flagged kFlagOutput.
absl::StatusOr<Graph> BuildGraph(absl::Span<Tensor* const> outputs, size_t max_nodes = 1 << 20);

// The topology hash behind Graph::uid().
uint64_t TopologyUid(const Graph& graph);

}  // namespace tg

#endif  // TENSORGRID_CORE_GRAPH_H_
