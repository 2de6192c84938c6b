// StateDeriver: derives, node by node, the split state of each compute tensor of a graph
// from its sources' states: compute ops by their rule (split_rules.h), which may ask for
// sources in other states (converted first), view ops by how a split passes through them
// (view_split.h; a split that cannot pass is gathered first). It then has the node's
// shadows built from its sources' and records both in the placements. Not thread-safe.
#ifndef TENSORGRID_META_STATE_DERIVER_H_
#define TENSORGRID_META_STATE_DERIVER_H_

#include "absl/status/status.h"
#include "core/tensor.h"
#include "meta/placements.h"
#include "meta/shadow_builder.h"
#include "meta/split_converter.h"

namespace tg::meta {

class StateDeriver {
 public:
  StateDeriver(Placements& placements, SplitConverter& converter, ShadowBuilder& shadows)
      : placements_(placements), converter_(converter), shadows_(shadows) {}

  // Derives `node`, whose sources are registered in the placements, into *out.
  // FAILED_PRECONDITION for a write into a gathered copy; a rule's errors (split_rules.h).
  absl::Status Derive(Tensor* node, Placement* out);

 private:
  absl::Status DeriveCompute(Tensor* node, Placement* out);
  absl::Status DeriveReshape(Tensor* node, Placement* out);
  absl::Status DeriveView(Tensor* node, Placement* out);

  Placements& placements_;
  SplitConverter& converter_;
  ShadowBuilder& shadows_;
};

}  // namespace tg::meta

#endif  // TENSORGRID_META_STATE_DERIVER_H_
