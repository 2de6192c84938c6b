// PlanMemory: each device's compute memory for the partition plans of one meta stream. A
// device holds only what its own subgraphs need: its slices of split tensors, its copies of
// mirrored ones, the tensors the plan adds there (gathered and packed copies, zeros), laid
// out by the liveness of that device's work, so that memory is reused as on one device.
// One GraphAllocator per device does the layout, over an allocation graph of the plan on
// that device (AllocationGraph below): its subgraphs' nodes in run order, each tensor the
// plan adds just before its first use, and keep-alive markers where something outside the
// subgraphs still reads a tensor:
//   - the collectives of a step read and write their tensors after the step's nodes; peers
//     that skip the trailing barrier may still read them while this device runs the next
//     step, so they stay alive until the end of the step after;
//   - the caller reads the registered results (and inputs) back after the Compute;
//   - tensors that must read as zeros are zeroed before every Compute, so they live
//     throughout.
// All plans of a stream share the memory (like graphs sharing one GraphAllocator): a plan
// keeps its layout until a device's memory has to grow for another plan or its own shapes
// change. Each Place starts a new epoch: shadows registered for GetTensor by an earlier
// Compute are no longer valid then. Used by its stream's thread; epoch() from any thread.
#ifndef TENSORGRID_META_PLAN_MEMORY_H_
#define TENSORGRID_META_PLAN_MEMORY_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "core/backend.h"
#include "core/graph.h"
#include "core/graph_allocator.h"
#include "meta/partition_plan.h"
#include "meta/pointer_index.h"

namespace tg::meta {

// The allocation graph of a plan on one device (see above). Reused across calls.
class AllocationGraph {
 public:
  // Builds the graph of `plan` on device d; the leafs are the inputs' shadows and the zeros.
  void Build(const PartitionPlan& plan, int d);
  Graph& graph() { return graph_; }
  // The plan tensors the graph owns memory for (every tensor but views and markers).
  bool Owns(const Tensor& t) const;
  // True for the keep-alive markers.
  static bool IsMarker(const Tensor& t);

 private:
  void Take(const Tensor* t);
  void Mark(const std::vector<Tensor*>& alive);

  Graph graph_;
  const std::vector<Tensor*>* extras_list_ = nullptr;  // the plan's extras on the device,
  PointerIndex extras_;                                // -> their index,
  std::vector<bool> placed_;                           // and whether the graph has it yet.
  std::deque<Tensor> markers_;
  std::vector<Tensor*> step_comms_;  // tensors the current step's collectives use.
  std::vector<Tensor*> last_comms_;  // the previous step's, alive until this step ends.
};

class PlanMemory {
 public:
  // `types[d]`: device d's memory.
  explicit PlanMemory(std::vector<BufferType*> types);

  // Gives `plan`'s tensors their memory on every device (keeping the layout an earlier call
  // made when still valid), zeroes its zero tensors and starts a new epoch. Errors name the
  // device whose memory failed.
  absl::Status Place(PartitionPlan& plan);
  // Advanced by every Place.
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  // Bytes of compute memory held on device d.
  size_t bytes(int d) const { return allocators_[d]->buffer_size(); }

 private:
  absl::Status LayOut(PartitionPlan& plan, int d);

  std::vector<BufferType*> types_;
  std::vector<std::unique_ptr<GraphAllocator>> allocators_;  // per device.
  // Changes whenever a device's memory is reallocated (every plan's layout is then stale).
  uint64_t stamp_ = 1;
  std::atomic<uint64_t> epoch_{0};
  AllocationGraph scratch_;
};

}  // namespace tg::meta

#endif  // TENSORGRID_META_PLAN_MEMORY_H_
