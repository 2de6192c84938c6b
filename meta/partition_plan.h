// PartitionPlan: what partitioning a graph of a meta device yields (graph_partition.h) and
// MetaStream runs: steps of per-device subgraphs, each followed by its collectives; which
// graph tensors have shadows at mirror offsets; the plan's private tensors; which graph
// tensors to scatter before and register after a Compute. A plan outlives the graph it was
// built from: it names the graph's tensors by slot and is reused (replayed) for graphs of
// the same structure. Thread-compatible.
#ifndef TENSORGRID_META_PARTITION_PLAN_H_
#define TENSORGRID_META_PARTITION_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/backend.h"
#include "core/graph.h"
#include "meta/plan_tape.h"
#include "meta/shadow_set.h"
#include "meta/split_state.h"

namespace tg::meta {

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
  PlanTape tape;  // every shadow and added tensor, in creation order.
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
  // ShadowLookup::ResidentGeneration() `generation`; a plan is replayed only for a graph
  // whose leafs bind the same way.
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

// The original tensor a slot names in `graph`.
inline Tensor* SlotTensor(Graph& graph, const GraphSlot& slot) {
  return slot.leaf ? graph.leafs[slot.index] : graph.nodes[slot.index];
}

}  // namespace tg::meta

#endif  // TENSORGRID_META_PARTITION_PLAN_H_
