// Partitioning a graph of a meta device into per-device subgraphs: every tensor gets a split
// state (weights and inputs from the device's SplitFn, compute tensors from split_rules.h and
// view_split.h) and, per device, a shadow tensor built with the core graph builder (so each
// shadow passes the shape rules). Where a source is not in the state its consumer needs, the
// plan converts it: a whole tensor is sliced by a view (free), a PARTIAL one is all-reduced,
// a split one all-gathered. Collectives cut the plan into steps: each step runs one subgraph
// per device (in parallel), then its collectives.
//
// The work is done by parts with narrow interfaces, driven node by node from
// graph_partition.cc:
//   StateDeriver   (state_deriver.h)    the split state of each node from its sources';
//   SplitConverter (split_converter.h)  sources brought to the state a rule needs;
//   ShadowBuilder  (shadow_builder.h)   the per-device shadow tensors;
//   PlanEmitter    (plan_emitter.h)     steps, collectives, views and private memory;
//   PlanTape       (plan_tape.h)        the plan's tensors, refreshed in place by a replay;
// over Placements (placements.h: each tensor's state and shadows in this partition) and the
// device seen through ShadowLookup (shadow_lookup.h: where a tensor lives, resident shadows).
//
// Memory: the partition places nothing. The stream lays out every tensor of the plan that
// needs memory (inputs' shadows, the nodes each device computes, the tensors the plan adds:
// gathered and packed copies, zero partials) in each device's own compute memory, by the
// liveness of that device's subgraphs (plan_memory.h).
// A plan is built once per graph structure. A graph of the same structure but other shapes (the
// next decode step: the KV length grows) replays the plan: the same derivation runs again,
// refreshing the plan's own tensors in place instead of creating new ones, which keeps per-step
// work small. Not thread-safe.
#ifndef TENSORGRID_META_GRAPH_PARTITION_H_
#define TENSORGRID_META_GRAPH_PARTITION_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/graph.h"
#include "meta/partition_plan.h"
#include "meta/shadow_lookup.h"

namespace tg::meta {

// Builds the plan of `graph` (all tensors placed in `device`'s buffers) and allocates its
// private memory. Errors name the node that cannot be split.
absl::StatusOr<std::shared_ptr<PartitionPlan>> PartitionGraph(const ShadowLookup& device,
                                                              Graph& graph);

// Re-derives `plan`, built for a graph of the same structure, for `graph`. Returns false when
// that fails (the structure differs, or a rule no longer holds); the plan is then unusable
// and must be dropped.
bool ReplayPartition(const ShadowLookup& device, Graph& graph, PartitionPlan* plan);

// True when `graph`'s leafs bind to resident tensors as the plan's did.
bool BindingsMatch(const ShadowLookup& device, const PartitionPlan& plan, const Graph& graph);

}  // namespace tg::meta

#endif  // TENSORGRID_META_GRAPH_PARTITION_H_
