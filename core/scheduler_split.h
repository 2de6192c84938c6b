// Splits for the scheduler: cuts an assigned graph's node sequence into runs of consecutive
// nodes on one device and gives each run (split) a copy, in its device's memory, of every
// input it reads from another device: results computed elsewhere, and leafs in memory the
// device cannot use. Nodes are rewired to read the copies only while a SplitPlan's rewiring
// is applied (ApplyRewires / RestoreRewires), so the caller's graph is otherwise unchanged.
// Thread-compatible.
#ifndef TENSORGRID_CORE_SCHEDULER_SPLIT_H_
#define TENSORGRID_CORE_SCHEDULER_SPLIT_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/backend.h"
#include "core/context.h"
#include "core/graph.h"
#include "core/scheduler_assign.h"

namespace tg {

// One split input: `src` lives on another device; `copy` (same type, ne and nb) is filled
// from it in the split's device memory before the split runs.
struct SplitInput {
  Tensor* src = nullptr;
  Tensor* copy = nullptr;
};

struct Split {
  int device = 0;    // index into the scheduler's device list.
  size_t begin = 0;  // node range [begin, end) of the full graph.
  size_t end = 0;
  std::vector<SplitInput> inputs;
  Graph graph;  // the nodes of the range; leafs: everything they read from outside.
};

// A node source that reads a copy while the plan is applied.
struct SourceRewire {
  Tensor* node = nullptr;
  int index = 0;  // which src[] slot.
  Tensor* original = nullptr;
  Tensor* copy = nullptr;
};

struct SplitPlan {
  std::vector<Split> splits;
  std::vector<SourceRewire> rewires;

  void ApplyRewires() const;
  void RestoreRewires() const;
};

// Cuts `graph` (every tensor assigned in `assignment`) into splits. Copy tensors are created
// in `ctx` and recorded in `assignment` on their split's device.
absl::StatusOr<SplitPlan> CutSplits(const Graph& graph, absl::Span<Device* const> devices,
                                    DeviceAssignment& assignment, Context& ctx);

}  // namespace tg

#endif  // TENSORGRID_CORE_SCHEDULER_SPLIT_H_
