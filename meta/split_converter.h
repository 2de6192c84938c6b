// SplitConverter: brings a tensor of the graph being partitioned to the split state a
// consumer needs:
//   MIRRORED -> AXIS     a view of each device's copy (free);
//   PARTIAL  -> MIRRORED an all-reduce, in place when the tensor is a plain node nobody
//                        views (its placement then changes), else into packed copies; a
//                        device holding nothing contributes a zeroed tensor;
//   AXIS     -> MIRRORED an all-gather into new tensors;
//   AXIS     -> AXIS'    a gather, then a view.
// Conversions are kept in the placements, so that consumers of one tensor in one state share
// one conversion. Collectives go to the emitter. Not thread-safe.
#ifndef TENSORGRID_META_SPLIT_CONVERTER_H_
#define TENSORGRID_META_SPLIT_CONVERTER_H_

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "meta/placements.h"
#include "meta/plan_emitter.h"
#include "meta/shadow_builder.h"
#include "meta/split_state.h"

namespace tg::meta {

class SplitConverter {
 public:
  SplitConverter(Placements& placements, ShadowBuilder& shadows, PlanEmitter& emitter)
      : placements_(placements), shadows_(shadows), emitter_(emitter) {}

  // t (registered in the placements) in `target`: its own placement when it is in that state
  // already. UNIMPLEMENTED for an all-reduce of a non-F32 tensor and for segmented targets.
  absl::StatusOr<const Placement*> Convert(Tensor* t, const SplitState& target);

 private:
  absl::StatusOr<const Placement*> Reduce(Tensor* t);
  absl::StatusOr<const Placement*> Gather(Tensor* t);
  absl::StatusOr<const Placement*> Slice(Tensor* t, const Placement& whole,
                                         const SplitState& target);

  Placements& placements_;
  ShadowBuilder& shadows_;
  PlanEmitter& emitter_;
};

}  // namespace tg::meta

#endif  // TENSORGRID_META_SPLIT_CONVERTER_H_
