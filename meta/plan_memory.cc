#include "meta/plan_memory.h"

#include "absl/strings/str_cat.h"
#include "core/lost_endpoint.h"
#include "core/status_macros.h"

namespace tg::meta {
namespace {

// Marks AllocationGraph's keep-alive markers: nodes that only read (the allocator places
// nothing for them). A bit no core flag uses, set only on the markers.
constexpr uint32_t kFlagKeepAlive = 1u << 30;

}  // namespace

bool AllocationGraph::IsMarker(const Tensor& t) { return (t.flags & kFlagKeepAlive) != 0; }

bool AllocationGraph::Owns(const Tensor& t) const { return t.view_src == nullptr && !IsMarker(t); }

void AllocationGraph::Build(const PartitionPlan& plan, int d) {
  graph_.leafs.clear();
  graph_.nodes.clear();
  markers_.clear();
  last_comms_.clear();
  extras_list_ = &plan.extras[d];
  extras_.Reset(extras_list_->size());
  for (size_t i = 0; i < extras_list_->size(); ++i) {
    extras_.Insert((*extras_list_)[i], static_cast<int32_t>(i));
  }
  placed_.assign(extras_list_->size(), false);
  for (const PartitionPlan::Io& in : plan.inputs) {
    if (in.set.shadows[d] != nullptr) graph_.leafs.push_back(in.set.shadows[d]);
  }
  for (Tensor* z : plan.zeros[d]) graph_.leafs.push_back(z);
  for (const PlanStep& step : plan.steps) {
    for (Tensor* node : step.graphs[d].nodes) {
      for (const Tensor* s : node->src) Take(s);
      Take(node->view_src);
      if (const int32_t i = extras_.Find(node); i >= 0) placed_[i] = true;  // a packed copy.
      graph_.nodes.push_back(node);
    }
    step_comms_.clear();
    for (const CommOp& op : step.comms) {
      if (!op.src.empty() && op.src[d] != nullptr) step_comms_.push_back(op.src[d]);
      if (op.dst[d] != nullptr) step_comms_.push_back(op.dst[d]);
    }
    for (const Tensor* t : step_comms_) Take(t);
    Mark(step_comms_);
    Mark(last_comms_);
    last_comms_.swap(step_comms_);
  }
  for (const PartitionPlan::Io& r : plan.results) {
    if (r.set.shadows[d] != nullptr) last_comms_.push_back(r.set.shadows[d]);
  }
  last_comms_.insert(last_comms_.end(), plan.zeros[d].begin(), plan.zeros[d].end());
  Mark(last_comms_);
}

// A tensor the plan added enters the graph (gets memory) where it is first used.
void AllocationGraph::Take(const Tensor* t) {
  if (t == nullptr) return;
  if (t->view_src != nullptr) t = t->view_src;
  const int32_t i = extras_.Find(t);
  if (i < 0 || placed_[i]) return;
  placed_[i] = true;
  graph_.nodes.push_back((*extras_list_)[i]);
}

void AllocationGraph::Mark(const std::vector<Tensor*>& alive) {
  for (size_t i = 0; i < alive.size(); i += kMaxSrc) {
    Tensor& m = markers_.emplace_back();
    m.flags = kFlagKeepAlive;
    for (size_t j = 0; j < kMaxSrc && i + j < alive.size(); ++j) m.src[j] = alive[i + j];
    graph_.nodes.push_back(&m);
  }
}

PlanMemory::PlanMemory(std::vector<BufferType*> types) : types_(std::move(types)) {
  for (BufferType* type : types_) {
    allocators_.push_back(std::make_unique<GraphAllocator>(type));
    allocators_.back()->set_filter([](const Tensor& t) { return !AllocationGraph::IsMarker(t); });
  }
}

absl::Status PlanMemory::Place(PartitionPlan& plan) {
  epoch_.fetch_add(1, std::memory_order_acq_rel);
  if (plan.layout_changed || plan.memory_stamp != stamp_) {
    plan.memory_stamp = 0;
    for (int d = 0; d < static_cast<int>(allocators_.size()); ++d) {
      TG_RETURN_IF_ERROR(LayOut(plan, d));
    }
    plan.memory_stamp = stamp_;
    plan.layout_changed = false;
  }
  // Other tensors (of this plan or another) used the zeros' memory since the last run.
  for (const std::vector<Tensor*>& zeros : plan.zeros) {
    for (Tensor* z : zeros) TG_RETURN_IF_ERROR(z->buffer->MemsetTensor(z, 0, 0, z->NumBytes()));
  }
  return absl::OkStatus();
}

absl::Status PlanMemory::LayOut(PartitionPlan& plan, int d) {
  scratch_.Build(plan, d);
  Graph& g = scratch_.graph();
  // The plan's tensors may still point into memory an earlier layout gave them (perhaps
  // freed since): the allocator places only tensors without memory.
  for (const std::vector<Tensor*>* list : {&g.leafs, &g.nodes}) {
    for (Tensor* t : *list) {
      if (!scratch_.Owns(*t)) continue;
      t->data = nullptr;
      t->buffer = nullptr;
    }
  }
  GraphAllocator& allocator = *allocators_[d];
  const size_t before = allocator.buffer_size();
  absl::Status s = allocator.Allocate(g);
  if (allocator.buffer_size() != before) ++stamp_;  // other plans' tensors lost their memory.
  if (s.ok()) return s;
  const Device* device = types_[d]->device();
  return KeepIdentity(
      s, absl::Status(s.code(),
                      absl::StrCat(device != nullptr ? device->name() : types_[d]->name(),
                                   ": compute memory of a tensor-parallel graph: ", s.message())));
}

}  // namespace tg::meta
