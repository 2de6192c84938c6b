// PartitionPlan: what partitioning a graph of a meta device yields (graph_partition.h) and
// MetaStream runs: steps of per-device subgraphs, each followed by its collectives; the
// plan's private tensors (and which of them must read as zeros); which graph tensors to
// scatter before and register after a Compute. Every tensor of a plan that needs memory
// (inputs' shadows, the nodes the subgraphs compute, private tensors) gets it from the
// stream's per-device compute memory (plan_memory.h). A plan outlives the graph it was
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
  // Per device: tensors the plan adds beyond the shadows of graph tensors (gathered and
  // packed copies, all-reduce targets of devices that hold nothing), and tensors that must
  // read as zeros whenever a subgraph runs (a partial sum's missing addend).
  std::vector<std::vector<Tensor*>> extras;
  std::vector<std::vector<Tensor*>> zeros;
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
  // Set by a partition that made tensors or changed their shapes (a fresh one, or a replay
  // that reshaped something): their memory must be laid out again. PlanMemory clears it and
  // records the layout it made in `memory_stamp`.
  bool layout_changed = true;
  uint64_t memory_stamp = 0;
};

// The original tensor a slot names in `graph`.
inline Tensor* SlotTensor(Graph& graph, const GraphSlot& slot) {
  return slot.leaf ? graph.leafs[slot.index] : graph.nodes[slot.index];
}

}  // namespace tg::meta

#endif  // TENSORGRID_META_PARTITION_PLAN_H_
