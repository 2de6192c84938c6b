// Partitioning a graph of a meta device into per-device subgraphs: every tensor gets a split
// state (weights and inputs from the device's SplitFn, compute tensors from split_rules.h and
// view_split.h) and, per device, a shadow tensor built with the core graph builder (so each
// shadow passes the shape rules). Where a source is not in the state its consumer needs, the
// plan converts it: a whole tensor is sliced by a view (free), a PARTIAL one is all-reduced,
// a split one all-gathered. Collectives cut the plan into steps: each step runs one subgraph
// per device (in parallel), then its collectives.
//
// Memory: a shadow of a graph tensor is placed, each Compute, at the same offset of its
// buffer's per-device mirror as the tensor has in the meta buffer (a shadow is never larger
// than its tensor, so the graph allocator's layout is valid for it); tensors the plan adds
// (gathered copies, contiguous copies, zero-filled partials) get private per-device memory.
// A plan is built once per graph topology and reused as is for the same topology. A graph
// of the same structure but other shapes (the next decode step: the KV length grows)
// replays the plan: the same derivation runs again, refreshing the plan's own tensors in
// place instead of creating new ones, which keeps per-step work small. Not thread-safe.
#ifndef TENSORGRID_META_GRAPH_PARTITION_H_
#define TENSORGRID_META_GRAPH_PARTITION_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/context.h"
#include "core/graph.h"
#include "meta/shadow_set.h"
#include "meta/split_state.h"

namespace tg::meta {

class MetaDevice;

// A collective between the subgraphs of two steps.
struct CommOp {
  enum class Kind {
    kAllReduce,  // dst[d] += every other dst (after zeroing the devices in zero_fill).
    kAllGather,  // dst[d] (whole) = every device's src slice, cut as `state` says.
  };
  Kind kind = Kind::kAllReduce;
  SplitState state;              // kAllGather: how src is cut.
  const Tensor* full = nullptr;  // kAllGather: the whole tensor's type and shape.
  std::vector<Tensor*> src;      // kAllGather: per device (nullptr: holds nothing).
  std::vector<Tensor*> dst;      // per device.
  std::vector<bool> zero_fill;   // kAllReduce: devices that contribute nothing.
};

struct PlanStep {
  std::vector<Graph> graphs;  // per device.
  std::vector<CommOp> comms;  // run in order after every device's graph.
};

// Where an original tensor sits in its graph (plans outlive the graph they were built from
// and are reused for graphs of the same topology).
struct GraphSlot {
  bool leaf = false;
  size_t index = 0;
};

struct PartitionPlan {
  int n_devices = 0;
  Context ctx;                // every shadow and added tensor...
  std::vector<Tensor*> tape;  // ...in creation order (what a replay refreshes).
  std::vector<PlanStep> steps;
  // Graph tensors with memory of their own and their shadows (placed at mirror offsets).
  struct Mirrored {
    GraphSlot slot;
    ShadowList shadows;
  };
  std::vector<Mirrored> mirrored;
  std::vector<std::vector<Tensor*>> views;   // per device, in order: re-pointed after placement.
  std::vector<std::vector<Tensor*>> extras;  // per device: tensors with private memory.
  std::vector<std::unique_ptr<Buffer>> extra_buffers;  // per device (nullptr: none needed).
  // Graph leafs to scatter written data to, and tensors to register for GetTensor.
  struct Io {
    GraphSlot slot;
    ShadowSet set;
  };
  std::vector<Io> inputs;
  std::vector<Io> results;
  // Per leaf: the resident tensor it was (nullptr for graph tensors) and its shadows, under
  // MetaBuffer::ResidentGeneration() `generation`; a plan is replayed only for a graph whose
  // leafs bind the same way.
  std::vector<const Tensor*> bindings;
  std::vector<ShadowSet> resident;
  uint64_t generation = 0;
  int64_t comm_count = 0;
  // Some node writes into a graph tensor (not a resident one): the ranks must then finish
  // each collective together, since the next step could overwrite what a slower rank
  // still reads.
  bool writes_graph_tensors = false;
  // The partitioner's working storage, kept so that a replay reuses it (graph_partition.cc).
  std::shared_ptr<void> scratch;
};

// Builds the plan of `graph` (all tensors placed in `device`'s buffers) and allocates its
// private memory. Errors name the node that cannot be split.
absl::StatusOr<std::shared_ptr<PartitionPlan>> PartitionGraph(MetaDevice& device, Graph& graph);

// Re-derives `plan`, built for a graph of the same structure, for `graph`. Returns false when
// that fails (the structure differs, or a rule no longer holds); the plan is then unusable
// and must be dropped.
bool ReplayPartition(MetaDevice& device, Graph& graph, PartitionPlan* plan);

// True when `graph`'s leafs bind to resident tensors as the plan's did.
bool BindingsMatch(const MetaDevice& device, const PartitionPlan& plan, const Graph& graph);

// The original tensor a slot names in `graph`.
inline Tensor* SlotTensor(Graph& graph, const GraphSlot& slot) {
  return slot.leaf ? graph.leafs[slot.index] : graph.nodes[slot.index];
}

}  // namespace tg::meta

#endif  // TENSORGRID_META_GRAPH_PARTITION_H_
