// The meta devices tg-ops checks: tensor parallel over a set of devices, with every graph
// input cut by a fixed rule (there are no weight names in op cases), in uneven proportions
// (n:n-1:..:1, so small dimensions also leave devices empty):
//   META(...)    along the input's outermost dimension with two or more elements (rows of
//                a weight, tokens, heads), exercising the split-keeping rules;
//   META-K(...)  along dimension 0 where it has two or more quant blocks, exercising
//                partial sums, all-reduce and the gathers of row-wise ops.
#ifndef TENSORGRID_TOOLS_TG_OPS_META_DEVICES_H_
#define TENSORGRID_TOOLS_TG_OPS_META_DEVICES_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/backend.h"

namespace tg::ops_tool {

// Both meta devices over `devices` (at least two).
absl::StatusOr<std::vector<std::unique_ptr<Device>>> MakeMetaDevices(
    const std::vector<Device*>& devices);

}  // namespace tg::ops_tool

#endif  // TENSORGRID_TOOLS_TG_OPS_META_DEVICES_H_
