// `tg-ops support`: the op x device matrix of Device::SupportsOp on a representative node
// of each op (the first catalogue case of that op).
#ifndef TENSORGRID_TOOLS_TG_OPS_SUPPORT_H_
#define TENSORGRID_TOOLS_TG_OPS_SUPPORT_H_

#include <vector>

#include "core/backend.h"
#include "tools/tg-ops/options.h"

namespace tg::ops_tool {

// Returns the process exit code (1 when a representative node cannot be built).
int RunSupportCommand(const Options& opts, const std::vector<Device*>& devices);

}  // namespace tg::ops_tool

#endif  // TENSORGRID_TOOLS_TG_OPS_SUPPORT_H_
