#include "meta/plan_emitter.h"

namespace tg::meta {

PlanEmitter::PlanEmitter(PartitionPlan* plan, int n_devices) : plan_(*plan), n_(n_devices) {
  for (PlanStep& step : plan_.steps) {
    for (Graph& g : step.graphs) g.nodes.clear();
    step.comms.clear();
  }
  plan_.extras.resize(n_);
  plan_.zeros.resize(n_);
  for (int d = 0; d < n_; ++d) {
    plan_.extras[d].clear();
    plan_.zeros[d].clear();
  }
  plan_.comm_count = 0;
}

void PlanEmitter::Emit(int d, Tensor* t) {
  if (!step_open_) {
    ++step_;
    if (step_ >= static_cast<int>(plan_.steps.size())) plan_.steps.emplace_back();
    plan_.steps[step_].graphs.resize(n_);
    step_open_ = true;
  }
  plan_.steps[step_].graphs[d].nodes.push_back(t);
}

void PlanEmitter::EmitComm(CommOp& op) {
  if (step_ < 0) {
    step_ = 0;
    if (plan_.steps.empty()) plan_.steps.emplace_back();
    plan_.steps[0].graphs.resize(n_);
  }
  // Filled member by member: moving a whole CommOp trips GCC's maybe-uninitialized on
  // absl::InlinedVector.
  CommOp& c = plan_.steps[step_].comms.emplace_back();
  c.kind = op.kind;
  if (op.kind == CommOp::Kind::kAllGather) c.state = op.state;
  c.full = op.full;
  c.src = std::move(op.src);
  c.dst = std::move(op.dst);
  c.zero_fill = std::move(op.zero_fill);
  step_open_ = false;
  ++plan_.comm_count;
}

void PlanEmitter::Finish() { plan_.steps.resize(step_ + 1); }

}  // namespace tg::meta
