// ShadowBuilder: makes the per-device tensors of a partition plan, each through the plan's
// tape (so that a replay refreshes it) and, where it computes, scheduled by the emitter:
//   - blank shadows of graph leafs (memory: the stream places them at mirror offsets);
//   - a compute node's shadow on each device from its sources' shadows there: a device
//     missing an addend of a PARTIAL sum gets a zero tensor for it (a device missing a
//     factor contributes nothing), strided slices are packed where the op refuses them, and
//     the result must have the slice shape the split state gives;
//   - the shadows of view ops (PERMUTE, RESHAPE, VIEW) and of slices of whole tensors;
//   - packed copies and the plan's own tensors (zeros, gather and all-reduce targets).
// It decides no split state: callers give the states and the sources' shadows.
// Not thread-safe.
#ifndef TENSORGRID_META_SHADOW_BUILDER_H_
#define TENSORGRID_META_SHADOW_BUILDER_H_

#include <optional>

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "meta/plan_emitter.h"
#include "meta/plan_tape.h"
#include "meta/shadow_set.h"
#include "meta/split_state.h"
#include "meta/view_split.h"

namespace tg::meta {

class ShadowBuilder {
 public:
  ShadowBuilder(PlanTape& tape, PlanEmitter& emitter)
      : tape_(tape), emitter_(emitter), n_(emitter.n_devices()) {}

  int n_devices() const { return n_; }
  // A list with no shadow on any device.
  ShadowList None() const { return ShadowList(n_, nullptr); }

  // Blank shadows of graph leaf t in `state` (none where a device holds nothing).
  absl::StatusOr<ShadowList> Blank(const Tensor& t, const SplitState& state);
  // The shadows of compute node `node` in `state`; srcs[i]: node.src[i]'s shadows (in the
  // state the op's rule asked for; nullptr for an absent source).
  absl::StatusOr<ShadowList> Node(const Tensor& node, const SplitState& state,
                                  const ShadowList* const srcs[kMaxSrc]);
  // PERMUTE / TRANSPOSE `node` applied to each of src.
  absl::StatusOr<ShadowList> Permute(const Tensor& node, const ShadowList& src);
  // RESHAPE `node` in `state` of each of src (packed first where strided: *packed is then
  // set, the shadows no longer alias src).
  absl::StatusOr<ShadowList> Reshape(const Tensor& node, const SplitState& state,
                                     const ShadowList& src, bool* packed);
  // VIEW `node` of root shadows `root`: per device as `mapped` slices it (nullptr: the whole
  // view, root mirrored); based on the view's source shadow in `src` where that keeps it a
  // view of the same root (so that it follows the graph's order of writes).
  absl::StatusOr<ShadowList> View(const Tensor& node, const ViewSplit* mapped,
                                  const ShadowList& root, const ShadowList& src);
  // Views of `whole` (each device's full copy) cut to `target` (AXIS, unsegmented).
  absl::StatusOr<ShadowList> Slice(const SplitState& target, const ShadowList& whole);

  // A tensor of t's type and shape with no memory (a collective's description of it).
  absl::StatusOr<Tensor*> Describe(const Tensor& t) { return tape_.NewBlank(t.type, t.ne); }
  // A tensor of the plan's own on device d (written before it is read).
  absl::StatusOr<Tensor*> Private(int d, DType type, const int64_t ne[kMaxDims]);
  // A tensor of the plan's own on device d that holds zeros whenever it is read.
  absl::StatusOr<Tensor*> Zeros(int d, DType type, const int64_t ne[kMaxDims]);
  // s itself when contiguous, else a packed copy on device d.
  absl::StatusOr<Tensor*> Contiguous(int d, Tensor* s);
  // Copies src into dst on device d.
  absl::Status Copy(int d, Tensor* src, Tensor* dst);

 private:
  // Device d's shadow of `node` from args (nullptr where d holds nothing of a source).
  absl::StatusOr<Tensor*> NodeOn(const Tensor& node, const SplitState& state, int d,
                                 Tensor* args[kMaxSrc]);
  // `made` (device d's shadow of node) checked against its slice shape, flagged and emitted.
  absl::StatusOr<Tensor*> Finish(const Tensor& node, const SplitState& state, int d, Tensor* made);
  absl::StatusOr<Tensor*> Emitted(int d, absl::StatusOr<Tensor*> t);
  void Name(const Tensor& t, int d, Tensor* s) const;

  PlanTape& tape_;
  PlanEmitter& emitter_;
  const int n_;
};

}  // namespace tg::meta

#endif  // TENSORGRID_META_SHADOW_BUILDER_H_
