// PlanEmitter: writes a partition plan's schedule. Each shadow node goes to its device's
// subgraph of the current step; each collective closes the step (the next node opens a new
// one), so a step is one subgraph per device followed by its collectives. Tensors the plan
// adds (gathered and packed copies, zero partials) are listed per device; their memory, as
// every other plan tensor's, comes from the stream's compute memory (plan_memory.h).
// Not thread-safe.
#ifndef TENSORGRID_META_PLAN_EMITTER_H_
#define TENSORGRID_META_PLAN_EMITTER_H_

#include "core/tensor.h"
#include "meta/partition_plan.h"

namespace tg::meta {

class PlanEmitter {
 public:
  // Clears `plan`'s schedule and private tensors (keeping their storage) for a run over
  // n_devices.
  PlanEmitter(PartitionPlan* plan, int n_devices);

  int n_devices() const { return n_; }
  // Appends t to device d's subgraph of the current step (opening one if needed).
  void Emit(int d, Tensor* t);
  // Appends a collective to the current step and closes it. Takes op's vectors.
  void EmitComm(CommOp& op);
  // t is a tensor of the plan's own on device d.
  void AddPrivate(int d, Tensor* t) { plan_.extras[d].push_back(t); }
  // t is a tensor of the plan's own on device d that must hold zeros when read.
  void AddZeros(int d, Tensor* t) { plan_.zeros[d].push_back(t); }
  // Drops steps an earlier run left beyond this one's.
  void Finish();

 private:
  PartitionPlan& plan_;
  const int n_;
  int step_ = -1;  // the step Emit appends to.
  bool step_open_ = false;
};

}  // namespace tg::meta

#endif  // TENSORGRID_META_PLAN_EMITTER_H_
