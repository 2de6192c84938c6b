#include "meta/plan_emitter.h"

#include <algorithm>

#include "core/status_macros.h"

namespace tg::meta {
namespace {

size_t AlignUp(size_t n, size_t align) { return (n + align - 1) / align * align; }

// Bytes a private tensor takes in its buffer (at least one, so each has its own address).
size_t Footprint(BufferType* bt, const Tensor& t) { return std::max<size_t>(bt->AllocSize(t), 1); }

absl::Status PlacePrivate(BufferType* bt, const std::vector<Tensor*>& tensors,
                          std::unique_ptr<Buffer>& buffer) {
  size_t total = 0;
  for (const Tensor* t : tensors) total = AlignUp(total, bt->alignment()) + Footprint(bt, *t);
  if (buffer == nullptr || buffer->size() < total) {
    buffer.reset();
    TG_ASSIGN_OR_RETURN(buffer, bt->Allocate(total));
    buffer->set_usage(BufferUsage::kCompute);
  }
  TG_RETURN_IF_ERROR(buffer->Clear(0));
  size_t offset = 0;
  for (Tensor* t : tensors) {
    offset = AlignUp(offset, bt->alignment());
    TG_RETURN_IF_ERROR(PlaceTensor(buffer.get(), t, offset));
    offset += Footprint(bt, *t);
  }
  return absl::OkStatus();
}

}  // namespace

PlanEmitter::PlanEmitter(PartitionPlan* plan, int n_devices) : plan_(*plan), n_(n_devices) {
  for (PlanStep& step : plan_.steps) {
    for (Graph& g : step.graphs) g.nodes.clear();
    step.comms.clear();
  }
  plan_.views.resize(n_);
  plan_.extras.resize(n_);
  for (int d = 0; d < n_; ++d) {
    plan_.views[d].clear();
    plan_.extras[d].clear();
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
  if (t->view_src != nullptr) plan_.views[d].push_back(t);
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

absl::Status PlanEmitter::Finish(const ShadowLookup& lookup) {
  plan_.steps.resize(step_ + 1);
  plan_.extra_buffers.resize(n_);
  for (int d = 0; d < n_; ++d) {
    if (plan_.extras[d].empty()) continue;
    TG_RETURN_IF_ERROR(
        PlacePrivate(lookup.DeviceBufferType(d), plan_.extras[d], plan_.extra_buffers[d]));
  }
  return absl::OkStatus();
}

}  // namespace tg::meta
