#include "meta/graph_partition.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "core/shape_rules.h"
#include "core/status_macros.h"
#include "meta/meta_buffer.h"
#include "meta/meta_device.h"
#include "meta/pointer_index.h"
#include "meta/split_rules.h"
#include "meta/view_split.h"

namespace tg::meta {
namespace {

size_t AlignUp(size_t n, size_t align) { return (n + align - 1) / align * align; }

Tensor* RootOf(Tensor* t) { return t->view_src != nullptr ? t->view_src : t; }

int WriteDestination(Op op) { return op == Op::kSetRows ? 0 : op == Op::kCpy ? 1 : -1; }

// Marks, during a replay, a plan tensor whose layout changed: tensors made from unchanged
// sources with unchanged arguments keep theirs without re-running the shape rule. (A bit no
// core flag uses, set only on the plan's own tensors.)
constexpr uint32_t kFlagReshaped = 1u << 31;

bool SameLayout(const Tensor& t, const NodeLayout& l) {
  return t.type == l.type && std::equal(t.ne, t.ne + kMaxDims, l.ne) &&
         std::equal(t.nb, t.nb + kMaxDims, l.nb) && t.view_src == l.view_src &&
         t.view_offs == l.view_offs;
}

struct Placement {
  SplitState state;
  ShadowList shadows;
  bool detached = false;  // shadows are copies: a write into them would be lost.
  bool aliased = false;   // views of the tensor exist: never all-reduce it in place.
  int version = 0;        // bumped when an in-place all-reduce changes the state.
};

// What a partitioner works with, kept in the plan between replays.
struct Scratch {
  std::vector<Placement> placements;  // leafs, then nodes.
  PointerIndex ids;                   // tensor -> index into placements.
  // Sources brought to another state, and the storage of those placements.
  std::vector<std::pair<const Tensor*, Placement*>> converted;
  std::vector<std::unique_ptr<Placement>> pool;
  size_t pool_used = 0;
  std::vector<const Tensor*> written;  // graph leafs some node writes into.
  std::vector<Tensor*> reshaped;       // plan tensors marked kFlagReshaped by the last run.
  std::vector<bool> done;              // CollectResults' visited marks.
};

Scratch& ScratchOf(PartitionPlan& plan) {
  if (plan.scratch == nullptr) plan.scratch = std::make_shared<Scratch>();
  return *static_cast<Scratch*>(plan.scratch.get());
}

// Derives a plan, or in replay mode re-derives one and refreshes its tensors in place.
class Partitioner {
 public:
  Partitioner(MetaDevice& device, Graph& graph, PartitionPlan* plan, bool replay)
      : dev_(device),
        graph_(graph),
        plan_(*plan),
        n_(device.n_devices()),
        replay_(replay),
        scratch_(ScratchOf(*plan)),
        placements_(scratch_.placements),
        ids_(scratch_.ids) {}

  absl::Status Run();
  bool mismatch() const { return mismatch_; }

 private:
  absl::Status PlaceLeaf(size_t index);
  absl::Status DeriveNode(size_t index);
  absl::Status DeriveCompute(Tensor* node, Placement* out);
  absl::StatusOr<Tensor*> BuildShadow(Tensor* node, const SplitState& state, int d,
                                      Tensor* const args[kMaxSrc]);
  absl::Status DeriveView(Tensor* node, Placement* out);
  absl::Status DeriveReshape(Tensor* node, Placement* out);
  absl::Status DeriveViewOp(Tensor* node, Placement* out);
  absl::StatusOr<const Placement*> Convert(Tensor* t, const SplitState& target);
  absl::StatusOr<const Placement*> Reduce(Tensor* t);
  absl::StatusOr<const Placement*> Gather(Tensor* t);
  absl::StatusOr<const Placement*> Slice(Tensor* t, const Placement& whole,
                                         const SplitState& target);
  const Placement* Remember(Tensor* t, Placement p);

  // Every tensor of the plan is made by one of these, so that a replay refreshes them.
  absl::StatusOr<Tensor*> NewBlank(DType type, const int64_t ne[kMaxDims]);
  absl::StatusOr<Tensor*> NewNode(Op op, absl::Span<Tensor* const> src,
                                  absl::Span<const int32_t> params);
  absl::StatusOr<Tensor*> NewView(Tensor* base, const int64_t ne[kMaxDims],
                                  const size_t nb[kMaxDims], size_t offset);
  absl::StatusOr<Tensor*> NewReshape(Tensor* src, const int64_t ne[kMaxDims]);
  absl::StatusOr<Tensor*> Materialize(Tensor& proto);
  bool Unchanged(const Tensor& t, const Tensor& proto) const;
  void MarkReshaped(Tensor* t) {
    t->flags |= kFlagReshaped;
    scratch_.reshaped.push_back(t);
  }
  absl::StatusOr<Tensor*> NextFromTape();
  absl::Status Mismatch();

  absl::StatusOr<Tensor*> NewExtra(int d, DType type, const int64_t ne[kMaxDims]);
  absl::StatusOr<Tensor*> Contiguous(int d, Tensor* s);
  ShadowList NoShadows() const { return ShadowList(n_, nullptr); }
  absl::StatusOr<ShadowList> NewShadows(const Tensor& t, const SplitState& state);
  void Emit(int d, Tensor* t);
  void EmitComm(CommOp& op);
  void Reset();
  void CollectResults();
  absl::Status AllocateExtras();
  Placement& PlacementOf(const Tensor* t) { return placements_[ids_.Find(t)]; }
  GraphSlot SlotOf(const Tensor* t) const {
    const size_t id = ids_.Find(t);
    const size_t n_leafs = graph_.leafs.size();
    return id < n_leafs ? GraphSlot{true, id} : GraphSlot{false, id - n_leafs};
  }

  MetaDevice& dev_;
  Graph& graph_;
  PartitionPlan& plan_;
  const int n_;
  const bool replay_;
  size_t tape_pos_ = 0;
  bool mismatch_ = false;
  Scratch& scratch_;
  std::vector<Placement>& placements_;
  PointerIndex& ids_;
  int step_ = -1;  // the step Emit appends to.
  bool step_open_ = false;
};

void Partitioner::Reset() {
  // Containers keep their capacity across replays: a decode step allocates little.
  plan_.n_devices = n_;
  for (Tensor* t : scratch_.reshaped) t->flags &= ~kFlagReshaped;
  scratch_.reshaped.clear();
  for (PlanStep& step : plan_.steps) {
    for (Graph& g : step.graphs) g.nodes.clear();
    step.comms.clear();
  }
  plan_.mirrored.clear();
  plan_.views.resize(n_);
  plan_.extras.resize(n_);
  for (int d = 0; d < n_; ++d) {
    plan_.views[d].clear();
    plan_.extras[d].clear();
  }
  plan_.inputs.clear();
  plan_.results.clear();
  if (!replay_) {
    plan_.bindings.assign(graph_.leafs.size(), nullptr);
    plan_.resident.assign(graph_.leafs.size(), ShadowSet{});
    plan_.generation = MetaBuffer::ResidentGeneration();
  }
  plan_.comm_count = 0;
}

absl::Status Partitioner::Run() {
  Reset();
  const size_t n_leafs = graph_.leafs.size();
  placements_.clear();
  placements_.resize(n_leafs + graph_.nodes.size());
  ids_.Reset(placements_.size());
  scratch_.converted.clear();
  scratch_.pool_used = 0;
  scratch_.written.clear();
  plan_.writes_graph_tensors = false;
  for (Tensor* node : graph_.nodes) {
    const int dest = WriteDestination(node->op);
    if (dest < 0) continue;
    Tensor* root = RootOf(node->src[dest]);
    if (root->op == Op::kNone) scratch_.written.push_back(root);
    MetaBuffer* mb = dev_.AsOwnBuffer(root->buffer);
    if (mb == nullptr || mb->holds_graph_tensors()) plan_.writes_graph_tensors = true;
  }
  for (size_t i = 0; i < n_leafs; ++i) {
    ids_.Insert(graph_.leafs[i], static_cast<int32_t>(i));
    TG_RETURN_IF_ERROR(PlaceLeaf(i));
  }
  for (size_t i = 0; i < graph_.nodes.size(); ++i) {
    ids_.Insert(graph_.nodes[i], static_cast<int32_t>(n_leafs + i));
    TG_RETURN_IF_ERROR(DeriveNode(i));
  }
  if (replay_ && tape_pos_ != plan_.tape.size()) return Mismatch();
  plan_.steps.resize(step_ + 1);
  CollectResults();
  return AllocateExtras();
}

absl::Status Partitioner::Mismatch() {
  mismatch_ = true;
  return absl::AbortedError("the graph's structure differs from the plan's");
}

absl::StatusOr<Tensor*> Partitioner::NextFromTape() {
  if (tape_pos_ >= plan_.tape.size()) return Mismatch();
  return plan_.tape[tape_pos_++];
}

absl::StatusOr<Tensor*> Partitioner::NewBlank(DType type, const int64_t ne[kMaxDims]) {
  Tensor* t;
  if (replay_) {
    TG_ASSIGN_OR_RETURN(t, NextFromTape());
    if (t->op != Op::kNone) return Mismatch();
    if (t->type == type && std::equal(ne, ne + kMaxDims, t->ne)) return t;
    MarkReshaped(t);
  } else {
    t = plan_.ctx.NewBlank();
    plan_.tape.push_back(t);
  }
  t->type = type;
  std::copy(ne, ne + kMaxDims, t->ne);
  SetContiguousStrides(t);
  return t;
}

bool Partitioner::Unchanged(const Tensor& t, const Tensor& proto) const {
  for (const Tensor* s : proto.src) {
    if (s != nullptr && s->HasFlag(static_cast<TensorFlag>(kFlagReshaped))) return false;
  }
  const bool caller_shaped = proto.op == Op::kView || proto.op == Op::kReshape;
  return std::equal(proto.op_params, proto.op_params + kMaxOpParams, t.op_params) &&
         (!caller_shaped ||
          (std::equal(proto.ne, proto.ne + kMaxDims, t.ne) &&
           (proto.op != Op::kView ||
            (std::equal(proto.nb, proto.nb + kMaxDims, t.nb) && proto.view_offs == t.view_offs))));
}

absl::StatusOr<Tensor*> Partitioner::Materialize(Tensor& proto) {
  if (replay_ && tape_pos_ < plan_.tape.size()) {
    Tensor* t = plan_.tape[tape_pos_];
    if (t->op == proto.op && std::equal(t->src, t->src + kMaxSrc, proto.src) &&
        Unchanged(*t, proto)) {
      ++tape_pos_;
      return t;
    }
  }
  TG_ASSIGN_OR_RETURN(NodeLayout layout, ApplyShapeRule(proto));
  Tensor* t;
  if (replay_) {
    TG_ASSIGN_OR_RETURN(t, NextFromTape());
    if (t->op != proto.op || !std::equal(t->src, t->src + kMaxSrc, proto.src)) return Mismatch();
    if (!SameLayout(*t, layout)) MarkReshaped(t);
  } else {
    t = plan_.ctx.NewBlank();
    plan_.tape.push_back(t);
  }
  t->op = proto.op;
  std::copy(proto.op_params, proto.op_params + kMaxOpParams, t->op_params);
  std::copy(proto.src, proto.src + kMaxSrc, t->src);
  t->type = layout.type;
  std::copy(layout.ne, layout.ne + kMaxDims, t->ne);
  std::copy(layout.nb, layout.nb + kMaxDims, t->nb);
  t->view_src = layout.view_src;
  t->view_offs = layout.view_offs;
  return t;
}

absl::StatusOr<Tensor*> Partitioner::NewNode(Op op, absl::Span<Tensor* const> src,
                                             absl::Span<const int32_t> params) {
  Tensor proto;
  proto.op = op;
  for (size_t i = 0; i < src.size() && i < kMaxSrc; ++i) proto.src[i] = src[i];
  for (size_t i = 0; i < params.size() && i < kMaxOpParams; ++i) proto.op_params[i] = params[i];
  if (!src.empty() && src[0] != nullptr) proto.type = src[0]->type;
  return Materialize(proto);
}

absl::StatusOr<Tensor*> Partitioner::NewView(Tensor* base, const int64_t ne[kMaxDims],
                                             const size_t nb[kMaxDims], size_t offset) {
  Tensor proto;
  proto.op = Op::kView;
  proto.src[0] = base;
  proto.type = base->type;
  std::copy(ne, ne + kMaxDims, proto.ne);
  std::copy(nb, nb + kMaxDims, proto.nb);
  proto.nb[0] = BlockBytes(base->type);
  proto.view_offs = (base->view_src != nullptr ? base->view_offs : 0) + offset;
  return Materialize(proto);
}

absl::StatusOr<Tensor*> Partitioner::NewReshape(Tensor* src, const int64_t ne[kMaxDims]) {
  Tensor proto;
  proto.op = Op::kReshape;
  proto.src[0] = src;
  proto.type = src->type;
  std::copy(ne, ne + kMaxDims, proto.ne);
  return Materialize(proto);
}

// "name#d": which device's shadow of which tensor (errors and dumps name them).
void NameShadow(const Tensor& t, int d, Tensor* s) {
  if (t.name[0] == '\0') return;
  std::snprintf(s->name, kMaxName, "%.52s#%d", t.name, d);
}

absl::StatusOr<ShadowList> Partitioner::NewShadows(const Tensor& t, const SplitState& state) {
  ShadowList shadows = NoShadows();
  for (int d = 0; d < n_; ++d) {
    if (state.Empty(d)) continue;
    int64_t ne[kMaxDims];
    ShadowShape(t, state, d, ne);
    TG_ASSIGN_OR_RETURN(Tensor * s, NewBlank(t.type, ne));
    s->flags = (s->flags & kFlagReshaped) | (t.flags & (kFlagInput | kFlagOutput));
    if (!replay_) NameShadow(t, d, s);
    shadows[d] = s;
  }
  return shadows;
}

absl::Status Partitioner::PlaceLeaf(size_t index) {
  Tensor* leaf = graph_.leafs[index];
  MetaBuffer* mb = dev_.AsOwnBuffer(leaf->buffer);
  if (mb == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(DescribeTensor(*leaf), " is not in the memory of ", dev_.name(),
                     leaf->buffer == nullptr ? " (not placed)" : ""));
  }
  Placement& p = placements_[index];
  if (!mb->holds_graph_tensors()) {
    // A replay's bindings were checked: the resident shadows are the ones recorded.
    if (!replay_) {
      std::optional<ShadowSet> set = mb->Shadows(leaf);
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
  if (std::find(scratch_.written.begin(), scratch_.written.end(), leaf) != scratch_.written.end()) {
    p.state = SplitState::Mirrored();
  } else {
    TG_ASSIGN_OR_RETURN(p.state, dev_.DecideSplit(*leaf));
  }
  TG_ASSIGN_OR_RETURN(p.shadows, NewShadows(*leaf, p.state));
  const GraphSlot slot{true, index};
  plan_.mirrored.push_back({slot, p.shadows});
  plan_.inputs.push_back({slot, ShadowSet{p.state, p.shadows, nullptr}});
  return absl::OkStatus();
}

absl::Status Partitioner::DeriveNode(size_t index) {
  Tensor* node = graph_.nodes[index];
  Placement& p = placements_[graph_.leafs.size() + index];
  absl::Status s = IsViewOp(node->op) ? DeriveView(node, &p) : DeriveCompute(node, &p);
  if (!s.ok()) {
    if (mismatch_) return s;
    return absl::Status(s.code(), absl::StrCat(dev_.name(), ": cannot split ", OpName(node->op),
                                               " ", DescribeTensor(*node), ": ", s.message()));
  }
  if (node->view_src != nullptr) return absl::OkStatus();
  MetaBuffer* mb = dev_.AsOwnBuffer(node->buffer);
  if (mb == nullptr || !mb->holds_graph_tensors()) {
    return absl::FailedPreconditionError(
        absl::StrCat(DescribeTensor(*node), " is not in a compute buffer of ", dev_.name()));
  }
  plan_.mirrored.push_back({GraphSlot{false, index}, p.shadows});
  return absl::OkStatus();
}

absl::Status Partitioner::DeriveCompute(Tensor* node, Placement* out) {
  const int dest = WriteDestination(node->op);
  if (dest >= 0 && PlacementOf(node->src[dest]).detached) {
    return absl::FailedPreconditionError(
        "its destination is a gathered copy (the split cannot be viewed that way)");
  }
  // Converting one source can change another that is the same tensor (an in-place
  // all-reduce), so derive again until the states the rule saw are the ones used.
  for (int attempt = 0; attempt < kMaxSrc + 1; ++attempt) {
    const SplitState* states[kMaxSrc] = {};
    int seen[kMaxSrc] = {};
    for (int i = 0; i < kMaxSrc; ++i) {
      if (node->src[i] == nullptr) continue;
      const Placement& p = PlacementOf(node->src[i]);
      states[i] = &p.state;
      seen[i] = p.version;
    }
    TG_ASSIGN_OR_RETURN(OpSplit split, DeriveOpSplit(*node, states));
    const Placement* srcs[kMaxSrc] = {};
    for (int i = 0; i < kMaxSrc; ++i) {
      if (node->src[i] != nullptr && split.src[i].has_value()) {
        TG_ASSIGN_OR_RETURN(srcs[i], Convert(node->src[i], *split.src[i]));
      }
    }
    bool stable = true;
    for (int i = 0; i < kMaxSrc; ++i) {
      if (node->src[i] == nullptr || split.src[i].has_value()) continue;
      srcs[i] = &PlacementOf(node->src[i]);
      stable = stable && srcs[i]->version == seen[i];
    }
    if (!stable) continue;
    out->state = split.result;
    out->detached = dest >= 0 && srcs[dest]->detached;
    out->shadows = NoShadows();
    for (int d = 0; d < n_; ++d) {
      if (out->state.Empty(d)) continue;
      Tensor* args[kMaxSrc] = {};
      for (int i = 0; i < kMaxSrc; ++i) args[i] = srcs[i] ? srcs[i]->shadows[d] : nullptr;
      TG_ASSIGN_OR_RETURN(out->shadows[d], BuildShadow(node, out->state, d, args));
    }
    return absl::OkStatus();
  }
  return absl::InternalError("split states of the sources do not settle");
}

absl::StatusOr<Tensor*> Partitioner::BuildShadow(Tensor* node, const SplitState& state, int d,
                                                 Tensor* const in[kMaxSrc]) {
  Tensor* args[kMaxSrc];
  std::copy(in, in + kMaxSrc, args);
  int missing = 0;
  int present = 0;
  for (int i = 0; i < kMaxSrc; ++i) {
    if (node->src[i] == nullptr) continue;
    (args[i] == nullptr ? missing : present) += 1;
  }
  if (missing > 0) {
    // A device that holds nothing of a factor contributes nothing to a partial sum.
    if (!state.is_partial()) {
      return absl::InternalError(
          absl::StrCat("device ", d, " lacks a source of a ", state.ToString(), " result"));
    }
    if (node->op != Op::kAdd || present == 0) return nullptr;
    const int gap = args[0] == nullptr ? 0 : 1;
    TG_ASSIGN_OR_RETURN(args[gap], NewExtra(d, DType::kF32, node->src[gap]->ne));  // zeros.
  }
  const int arity = OpArity(node->op).total;
  const absl::Span<const int32_t> params(node->op_params, kMaxOpParams);
  absl::StatusOr<Tensor*> made = NewNode(node->op, absl::MakeSpan(args, arity), params);
  if (!made.ok() && !mismatch_) {
    // Slices of whole tensors are strided views; some ops want them packed. (A rule that
    // fails takes nothing from a replay's tape, so a replay retries the same way.)
    const int dest = WriteDestination(node->op);
    for (int i = 0; i < kMaxSrc; ++i) {
      if (args[i] != nullptr && i != dest && !args[i]->IsContiguous()) {
        TG_ASSIGN_OR_RETURN(args[i], Contiguous(d, args[i]));
      }
    }
    made = NewNode(node->op, absl::MakeSpan(args, arity), params);
  }
  TG_ASSIGN_OR_RETURN(Tensor * s, std::move(made));
  int64_t want[kMaxDims];
  ShadowShape(*node, state, d, want);
  if (!std::equal(want, want + kMaxDims, s->ne)) {
    return absl::InternalError(absl::StrCat("shadow on device ", d, " is ", DescribeTensor(*s),
                                            ", split ", state.ToString(), " needs ", want[0], "x",
                                            want[1], "x", want[2], "x", want[3]));
  }
  s->flags = (s->flags & kFlagReshaped) | (node->flags & (kFlagInput | kFlagOutput));
  if (!replay_) NameShadow(*node, d, s);
  Emit(d, s);
  return s;
}

absl::Status Partitioner::DeriveView(Tensor* node, Placement* out) {
  Tensor* src = node->src[0];
  PlacementOf(src).aliased = true;
  PlacementOf(RootOf(node)).aliased = true;
  if (node->op == Op::kReshape) return DeriveReshape(node, out);
  if (node->op == Op::kView) return DeriveViewOp(node, out);
  const Placement& sp = PlacementOf(src);
  out->state = PermuteSplit(sp.state, node->op_params);
  out->detached = sp.detached;
  out->shadows = NoShadows();
  const absl::Span<const int32_t> axes(node->op_params, kMaxDims);
  for (int d = 0; d < n_; ++d) {
    if (sp.shadows[d] == nullptr) continue;
    Tensor* const in[1] = {sp.shadows[d]};
    TG_ASSIGN_OR_RETURN(out->shadows[d], NewNode(node->op, in, axes));
    Emit(d, out->shadows[d]);
  }
  return absl::OkStatus();
}

absl::Status Partitioner::DeriveReshape(Tensor* node, Placement* out) {
  Tensor* src = node->src[0];
  const Placement* sp = &PlacementOf(src);
  out->state = sp->state;
  if (sp->state.is_axis()) {
    std::optional<SplitState> mapped = MapReshapeSplit(src->ne, sp->state, node->ne);
    if (mapped.has_value()) {
      out->state = *mapped;
    } else {
      TG_ASSIGN_OR_RETURN(sp, Convert(src, SplitState::Mirrored()));
      out->state = sp->state;
    }
  }
  out->detached = sp->detached;
  out->shadows = NoShadows();
  for (int d = 0; d < n_; ++d) {
    Tensor* s = sp->shadows[d];
    if (out->state.Empty(d) || s == nullptr) continue;
    if (!s->IsContiguous()) {
      TG_ASSIGN_OR_RETURN(s, Contiguous(d, s));
      out->detached = true;
    }
    int64_t ne[kMaxDims];
    ShadowShape(*node, out->state, d, ne);
    TG_ASSIGN_OR_RETURN(out->shadows[d], NewReshape(s, ne));
    Emit(d, out->shadows[d]);
  }
  return absl::OkStatus();
}

absl::Status Partitioner::DeriveViewOp(Tensor* node, Placement* out) {
  Tensor* root = RootOf(node);
  const Placement& sp = PlacementOf(node->src[0]);
  const Placement* rp = &PlacementOf(root);
  std::optional<ViewSplit> mapped;
  if (rp->state.is_axis()) {
    mapped = MapViewSplit(*root, rp->state, *node);
    if (!mapped.has_value()) {
      TG_ASSIGN_OR_RETURN(rp, Convert(root, SplitState::Mirrored()));
    }
  }
  out->state = mapped.has_value() ? mapped->state : rp->state;
  out->detached = rp->detached;
  out->shadows = NoShadows();
  for (int d = 0; d < n_; ++d) {
    Tensor* root_d = rp->shadows[d];
    if (root_d == nullptr || (mapped.has_value() && mapped->slices[d].empty)) continue;
    const int64_t* ne = mapped.has_value() ? mapped->slices[d].ne : node->ne;
    const size_t* nb = mapped.has_value() ? mapped->slices[d].nb : node->nb;
    const size_t offset = mapped.has_value() ? mapped->slices[d].offset : node->view_offs;
    // Prefer the source's shadow as the base: it keeps the graph's order of writes.
    Tensor* base = root_d;
    Tensor* s = sp.shadows[d];
    if (s != nullptr && RootOf(s) == root_d && (s->view_src == nullptr || s->view_offs <= offset)) {
      base = s;
    }
    const size_t base_offs = base->view_src != nullptr ? base->view_offs : 0;
    TG_ASSIGN_OR_RETURN(out->shadows[d], NewView(base, ne, nb, offset - base_offs));
    Emit(d, out->shadows[d]);
  }
  return absl::OkStatus();
}

const Placement* Partitioner::Remember(Tensor* t, Placement p) {
  if (scratch_.pool_used == scratch_.pool.size()) {
    scratch_.pool.push_back(std::make_unique<Placement>());
  }
  Placement* slot = scratch_.pool[scratch_.pool_used++].get();
  *slot = std::move(p);
  scratch_.converted.emplace_back(t, slot);
  return slot;
}

absl::StatusOr<const Placement*> Partitioner::Convert(Tensor* t, const SplitState& target) {
  Placement& p = PlacementOf(t);
  if (p.state == target) return &p;
  for (const auto& [from, c] : scratch_.converted) {
    if (from == t && c->state == target) return c;
  }
  if (target.is_mirrored()) return p.state.is_partial() ? Reduce(t) : Gather(t);
  if (!target.is_axis()) {
    return absl::InternalError(
        absl::StrCat("cannot turn ", p.state.ToString(), " into ", target.ToString()));
  }
  const Placement* whole = &p;
  if (!p.state.is_mirrored()) {
    TG_ASSIGN_OR_RETURN(whole, Convert(t, SplitState::Mirrored()));
  }
  return Slice(t, *whole, target);
}

absl::StatusOr<const Placement*> Partitioner::Reduce(Tensor* t) {
  if (t->type != DType::kF32) {
    return absl::UnimplementedError(absl::StrCat("all-reduce of ", DescribeTensor(*t)));
  }
  Placement& p = PlacementOf(t);
  bool in_place = t->view_src == nullptr && !p.aliased && !p.detached;
  for (Tensor* s : p.shadows) in_place = in_place && (s == nullptr || s->IsContiguous());
  CommOp op;
  op.kind = CommOp::Kind::kAllReduce;
  op.dst.resize(n_);
  op.zero_fill.assign(n_, false);
  for (int d = 0; d < n_; ++d) {
    Tensor* s = p.shadows[d];
    if (s == nullptr) {
      TG_ASSIGN_OR_RETURN(s, NewExtra(d, DType::kF32, t->ne));
      op.zero_fill[d] = true;
    } else if (!in_place) {
      // A packed copy: the original must stay partial for whoever reads it as such.
      TG_ASSIGN_OR_RETURN(Tensor * copy, NewExtra(d, DType::kF32, t->ne));
      Tensor* const in[2] = {s, copy};
      TG_ASSIGN_OR_RETURN(Tensor * cpy, NewNode(Op::kCpy, in, {}));
      Emit(d, cpy);
      s = copy;
    }
    op.dst[d] = s;
  }
  ShadowList reduced(op.dst.begin(), op.dst.end());
  EmitComm(op);
  if (in_place) {
    p.state = SplitState::Mirrored();
    p.shadows = std::move(reduced);
    ++p.version;
    return &p;
  }
  return Remember(t, Placement{SplitState::Mirrored(), std::move(reduced), true, false});
}

absl::StatusOr<const Placement*> Partitioner::Gather(Tensor* t) {
  const Placement& p = PlacementOf(t);
  CommOp op;
  op.kind = CommOp::Kind::kAllGather;
  op.state = p.state;
  TG_ASSIGN_OR_RETURN(Tensor * full, NewBlank(t->type, t->ne));
  op.full = full;
  op.src.resize(n_);
  op.dst.resize(n_);
  for (int d = 0; d < n_; ++d) {
    if (p.shadows[d] != nullptr) {
      TG_ASSIGN_OR_RETURN(op.src[d], Contiguous(d, p.shadows[d]));
    }
    TG_ASSIGN_OR_RETURN(op.dst[d], NewExtra(d, t->type, t->ne));
  }
  ShadowList whole(op.dst.begin(), op.dst.end());
  EmitComm(op);
  return Remember(t, Placement{SplitState::Mirrored(), std::move(whole), true, false});
}

absl::StatusOr<const Placement*> Partitioner::Slice(Tensor* t, const Placement& whole,
                                                    const SplitState& target) {
  if (target.segmented()) {
    return absl::UnimplementedError(
        absl::StrCat("cutting ", DescribeTensor(*t), " into ", target.ToString()));
  }
  const int k = target.axis();
  Placement out{target, NoShadows(), whole.detached, false};
  for (int d = 0; d < n_; ++d) {
    Tensor* w = whole.shadows[d];
    if (target.Count(d) == 0 || w == nullptr) continue;
    int64_t ne[kMaxDims];
    std::copy(w->ne, w->ne + kMaxDims, ne);
    ne[k] = target.Count(d);
    const int64_t begin = target.range(d).begin;
    const size_t offset = k == 0 ? RowBytes(w->type, begin) : begin * w->nb[k];
    TG_ASSIGN_OR_RETURN(out.shadows[d], NewView(w, ne, w->nb, offset));
    Emit(d, out.shadows[d]);
  }
  return Remember(t, std::move(out));
}

absl::StatusOr<Tensor*> Partitioner::Contiguous(int d, Tensor* s) {
  if (s->IsContiguous()) return s;
  Tensor* const in[1] = {s};
  TG_ASSIGN_OR_RETURN(Tensor * c, NewNode(Op::kCont, in, {}));
  plan_.extras[d].push_back(c);
  Emit(d, c);
  return c;
}

absl::StatusOr<Tensor*> Partitioner::NewExtra(int d, DType type, const int64_t ne[kMaxDims]) {
  TG_ASSIGN_OR_RETURN(Tensor * t, NewBlank(type, ne));
  plan_.extras[d].push_back(t);
  return t;
}

void Partitioner::Emit(int d, Tensor* t) {
  if (!step_open_) {
    ++step_;
    if (step_ >= static_cast<int>(plan_.steps.size())) plan_.steps.emplace_back();
    plan_.steps[step_].graphs.resize(n_);
    step_open_ = true;
  }
  plan_.steps[step_].graphs[d].nodes.push_back(t);
  if (t->view_src != nullptr) plan_.views[d].push_back(t);
}

void Partitioner::EmitComm(CommOp& op) {
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

void Partitioner::CollectResults() {
  std::vector<bool>& done = scratch_.done;
  done.assign(placements_.size(), false);
  auto add = [&](Tensor* t) {
    const size_t id = ids_.Find(t);
    if (done[id]) return;
    done[id] = true;
    const Placement& p = placements_[id];
    plan_.results.push_back({SlotOf(t), ShadowSet{p.state, p.shadows, nullptr}});
  };
  for (const PartitionPlan::Io& in : plan_.inputs) add(SlotTensor(graph_, in.slot));
  for (Tensor* node : graph_.nodes) {
    if (!node->HasFlag(kFlagOutput)) continue;
    Tensor* root = RootOf(node);
    MetaBuffer* mb = dev_.AsOwnBuffer(root->buffer);
    if (mb != nullptr && mb->holds_graph_tensors()) add(root);
  }
}

absl::Status Partitioner::AllocateExtras() {
  plan_.extra_buffers.resize(n_);
  for (int d = 0; d < n_; ++d) {
    if (plan_.extras[d].empty()) continue;
    BufferType* bt = dev_.device(d)->default_buffer_type();
    size_t total = 0;
    for (Tensor* t : plan_.extras[d]) {
      total = AlignUp(total, bt->alignment()) + std::max<size_t>(bt->AllocSize(*t), 1);
    }
    std::unique_ptr<Buffer>& buffer = plan_.extra_buffers[d];
    if (buffer == nullptr || buffer->size() < total) {
      buffer.reset();
      TG_ASSIGN_OR_RETURN(buffer, bt->Allocate(total));
      buffer->set_usage(BufferUsage::kCompute);
    }
    TG_RETURN_IF_ERROR(buffer->Clear(0));  // zero partials stay zero.
    size_t offset = 0;
    for (Tensor* t : plan_.extras[d]) {
      offset = AlignUp(offset, bt->alignment());
      TG_RETURN_IF_ERROR(PlaceTensor(buffer.get(), t, offset));
      offset += std::max<size_t>(bt->AllocSize(*t), 1);
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool BindingsMatch(const MetaDevice& device, const PartitionPlan& plan, const Graph& graph) {
  if (plan.bindings.size() != graph.leafs.size() ||
      plan.generation != MetaBuffer::ResidentGeneration()) {
    return false;
  }
  for (size_t i = 0; i < graph.leafs.size(); ++i) {
    const Tensor* leaf = graph.leafs[i];
    MetaBuffer* mb = device.AsOwnBuffer(leaf->buffer);
    const bool resident = mb != nullptr && !mb->holds_graph_tensors();
    if ((resident ? leaf : nullptr) != plan.bindings[i]) return false;
  }
  return true;
}

absl::StatusOr<std::shared_ptr<PartitionPlan>> PartitionGraph(MetaDevice& device, Graph& graph) {
  auto plan = std::make_shared<PartitionPlan>();
  Partitioner partitioner(device, graph, plan.get(), /*replay=*/false);
  TG_RETURN_IF_ERROR(partitioner.Run());
  return plan;
}

bool ReplayPartition(MetaDevice& device, Graph& graph, PartitionPlan* plan) {
  if (!BindingsMatch(device, *plan, graph)) return false;
  Partitioner partitioner(device, graph, plan, /*replay=*/true);
  // Any failure (a shape rule that no longer holds, too) sends the caller back to a full
  // partition, which reports real errors properly.
  return partitioner.Run().ok();
}

}  // namespace tg::meta
