#include "meta/graph_partition.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "meta/placements.h"
#include "meta/plan_emitter.h"
#include "meta/shadow_builder.h"
#include "meta/split_converter.h"
#include "meta/split_rules.h"
#include "meta/state_deriver.h"
#include "meta/view_split.h"

namespace tg::meta {
namespace {

using Home = ShadowLookup::Home;

// What a partitioner works with, kept in the plan between replays.
struct Scratch {
  Placements placements;               // leafs, then nodes.
  std::vector<const Tensor*> written;  // graph leafs some node writes into.
  std::vector<bool> done;              // CollectResults' visited marks.
};

Scratch& ScratchOf(PartitionPlan& plan) {
  if (plan.scratch == nullptr) plan.scratch = std::make_shared<Scratch>();
  return *static_cast<Scratch*>(plan.scratch.get());
}

// Derives a plan, or in replay mode re-derives one and refreshes its tensors in place: walks
// the graph, placing leafs and deriving nodes with the parts, and records what the stream
// needs to place, scatter and register.
class Partitioner {
 public:
  Partitioner(const ShadowLookup& lookup, Graph& graph, PartitionPlan* plan, bool replay)
      : lookup_(lookup),
        graph_(graph),
        plan_(*plan),
        replay_(replay),
        scratch_(ScratchOf(*plan)),
        placements_(scratch_.placements),
        emitter_(plan, lookup.n_devices()),
        shadows_(plan->tape, emitter_),
        converter_(placements_, shadows_, emitter_),
        deriver_(placements_, converter_, shadows_) {}

  absl::Status Run();

 private:
  void Reset();
  void FindWrites();
  absl::Status PlaceLeaf(size_t index);
  absl::Status DeriveNode(size_t index);
  void CollectResults();
  GraphSlot SlotOf(const Tensor* t) const {
    const size_t id = placements_.IndexOf(t);
    const size_t n_leafs = graph_.leafs.size();
    return id < n_leafs ? GraphSlot{true, id} : GraphSlot{false, id - n_leafs};
  }

  const ShadowLookup& lookup_;
  Graph& graph_;
  PartitionPlan& plan_;
  const bool replay_;
  Scratch& scratch_;
  Placements& placements_;
  PlanEmitter emitter_;
  ShadowBuilder shadows_;
  SplitConverter converter_;
  StateDeriver deriver_;
};

void Partitioner::Reset() {
  // Containers keep their capacity across replays: a decode step allocates little.
  plan_.n_devices = lookup_.n_devices();
  plan_.tape.Begin(replay_);
  plan_.inputs.clear();
  plan_.results.clear();
  if (!replay_) {
    plan_.bindings.assign(graph_.leafs.size(), nullptr);
    plan_.resident.assign(graph_.leafs.size(), ShadowSet{});
    plan_.generation = lookup_.ResidentGeneration();
  }
  placements_.Reset(graph_.leafs.size() + graph_.nodes.size());
}

void Partitioner::FindWrites() {
  scratch_.written.clear();
  plan_.writes_graph_tensors = false;
  for (Tensor* node : graph_.nodes) {
    const int dest = WriteDestination(node->op);
    if (dest < 0) continue;
    Tensor* root = ViewRoot(node->src[dest]);
    if (root->op == Op::kNone) scratch_.written.push_back(root);
    if (lookup_.HomeOf(*root) != Home::kResident) plan_.writes_graph_tensors = true;
  }
}

absl::Status Partitioner::Run() {
  Reset();
  FindWrites();
  for (size_t i = 0; i < graph_.leafs.size(); ++i) TG_RETURN_IF_ERROR(PlaceLeaf(i));
  for (size_t i = 0; i < graph_.nodes.size(); ++i) TG_RETURN_IF_ERROR(DeriveNode(i));
  TG_RETURN_IF_ERROR(plan_.tape.End());
  CollectResults();
  emitter_.Finish();
  // A replay that changed no tensor's shape leaves the memory layout as it was.
  plan_.layout_changed = plan_.layout_changed || !replay_ || plan_.tape.reshaped() > 0;
  return absl::OkStatus();
}

absl::Status Partitioner::PlaceLeaf(size_t index) {
  Tensor* leaf = graph_.leafs[index];
  Placement& p = placements_.Add(leaf);
  const Home home = lookup_.HomeOf(*leaf);
  if (home == Home::kElsewhere) {
    return absl::FailedPreconditionError(
        absl::StrCat(DescribeTensor(*leaf), " is not in the memory of ", lookup_.name(),
                     leaf->buffer == nullptr ? " (not placed)" : ""));
  }
  if (home == Home::kResident) {
    // A replay's bindings were checked: the resident shadows are the ones recorded.
    if (!replay_) {
      std::optional<ShadowSet> set = lookup_.ResidentShadows(*leaf);
      if (!set.has_value()) {
        return absl::InternalError(absl::StrCat(DescribeTensor(*leaf), " has no shadows"));
      }
      plan_.bindings[index] = leaf;
      plan_.resident[index] = std::move(*set);
    }
    p.state = plan_.resident[index].state;
    p.shadows = plan_.resident[index].shadows;
    return absl::OkStatus();
  }
  // A graph input the graph writes into is kept whole: not every write can follow every
  // split (rows picked by index cannot), and its data is scattered here anyway. Resident
  // tensors (the KV cache) keep theirs.
  const std::vector<const Tensor*>& written = scratch_.written;
  if (std::find(written.begin(), written.end(), leaf) != written.end()) {
    p.state = SplitState::Mirrored();
  } else {
    TG_ASSIGN_OR_RETURN(p.state, lookup_.DecideSplit(*leaf));
  }
  TG_ASSIGN_OR_RETURN(p.shadows, shadows_.Blank(*leaf, p.state));
  plan_.inputs.push_back({GraphSlot{true, index}, ShadowSet{p.state, p.shadows, nullptr}});
  return absl::OkStatus();
}

absl::Status Partitioner::DeriveNode(size_t index) {
  Tensor* node = graph_.nodes[index];
  Placement& p = placements_.Add(node);
  if (absl::Status s = deriver_.Derive(node, &p); !s.ok()) {
    if (plan_.tape.mismatch()) return s;
    return absl::Status(s.code(), absl::StrCat(lookup_.name(), ": cannot split ", OpName(node->op),
                                               " ", DescribeTensor(*node), ": ", s.message()));
  }
  if (node->view_src != nullptr || lookup_.HomeOf(*node) == Home::kGraph) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(DescribeTensor(*node), " is not in a compute buffer of ", lookup_.name()));
}

void Partitioner::CollectResults() {
  std::vector<bool>& done = scratch_.done;
  done.assign(placements_.size(), false);
  auto add = [&](Tensor* t) {
    const size_t id = placements_.IndexOf(t);
    if (done[id]) return;
    done[id] = true;
    const Placement& p = placements_.at(id);
    plan_.results.push_back({SlotOf(t), ShadowSet{p.state, p.shadows, nullptr}});
  };
  for (const PartitionPlan::Io& in : plan_.inputs) add(SlotTensor(graph_, in.slot));
  for (Tensor* node : graph_.nodes) {
    if (!node->HasFlag(kFlagOutput)) continue;
    Tensor* root = ViewRoot(node);
    if (lookup_.HomeOf(*root) == Home::kGraph) add(root);
  }
}

}  // namespace

bool BindingsMatch(const ShadowLookup& device, const PartitionPlan& plan, const Graph& graph) {
  if (plan.bindings.size() != graph.leafs.size() ||
      plan.generation != device.ResidentGeneration()) {
    return false;
  }
  for (size_t i = 0; i < graph.leafs.size(); ++i) {
    const Tensor* leaf = graph.leafs[i];
    const bool resident = device.HomeOf(*leaf) == Home::kResident;
    if ((resident ? leaf : nullptr) != plan.bindings[i]) return false;
  }
  return true;
}

absl::StatusOr<std::shared_ptr<PartitionPlan>> PartitionGraph(const ShadowLookup& device,
                                                              Graph& graph) {
  auto plan = std::make_shared<PartitionPlan>();
  Partitioner partitioner(device, graph, plan.get(), /*replay=*/false);
  TG_RETURN_IF_ERROR(partitioner.Run());
  return plan;
}

bool ReplayPartition(const ShadowLookup& device, Graph& graph, PartitionPlan* plan) {
  if (!BindingsMatch(device, *plan, graph)) return false;
  Partitioner partitioner(device, graph, plan, /*replay=*/true);
  // Any failure (a shape rule that no longer holds, too) sends the caller back to a full
  // partition, which reports real errors properly.
  return partitioner.Run().ok();
}

}  // namespace tg::meta
