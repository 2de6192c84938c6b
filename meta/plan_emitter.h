// PlanEmitter: writes a partition plan's schedule. Each shadow node goes to its device's
// subgraph of the current step; each collective closes the step (the next node opens a new
// one), so a step is one subgraph per device followed by its collectives. Views are listed
// per device to be re-pointed once the stream has placed their bases; tensors with private
// memory (gathered and packed copies, zero partials) are listed per device, and Finish lays
// them out in one zeroed buffer per device, reused by later runs when large enough.
// Not thread-safe.
#ifndef TENSORGRID_META_PLAN_EMITTER_H_
#define TENSORGRID_META_PLAN_EMITTER_H_

#include "absl/status/status.h"
#include "core/tensor.h"
#include "meta/partition_plan.h"
#include "meta/shadow_lookup.h"

namespace tg::meta {

class PlanEmitter {
 public:
  // Clears `plan`'s schedule, views and private tensors (keeping their storage) for a run
  // over n_devices.
  PlanEmitter(PartitionPlan* plan, int n_devices);

  int n_devices() const { return n_; }
  // Appends t to device d's subgraph of the current step (opening one if needed).
  void Emit(int d, Tensor* t);
  // Appends a collective to the current step and closes it. Takes op's vectors.
  void EmitComm(CommOp& op);
  // t gets private memory on device d (placed by Finish).
  void AddPrivate(int d, Tensor* t) { plan_.extras[d].push_back(t); }
  // Drops steps an earlier run left beyond this one's and places the private tensors in
  // per-device buffers of lookup.DeviceBufferType(d), zeroed (zero partials stay zero).
  absl::Status Finish(const ShadowLookup& lookup);

 private:
  PartitionPlan& plan_;
  const int n_;
  int step_ = -1;  // the step Emit appends to.
  bool step_open_ = false;
};

}  // namespace tg::meta

#endif  // TENSORGRID_META_PLAN_EMITTER_H_
