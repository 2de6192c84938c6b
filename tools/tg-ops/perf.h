// `tg-ops perf`: times representative shapes of each op on the selected devices and prints
// a table of us/run, GFLOP/s (matrix ops) and GB/s (bytes read + written).
#ifndef TENSORGRID_TOOLS_TG_OPS_PERF_H_
#define TENSORGRID_TOOLS_TG_OPS_PERF_H_

#include <vector>

#include "core/backend.h"
#include "tools/tg-ops/options.h"

namespace tg::ops_tool {

// Returns the process exit code: 0 unless a case failed to run.
int RunPerfCommand(const Options& opts, const std::vector<Device*>& devices);

}  // namespace tg::ops_tool

#endif  // TENSORGRID_TOOLS_TG_OPS_PERF_H_
