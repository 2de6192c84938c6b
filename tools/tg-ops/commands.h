// The tg-ops subcommands, each run over the selected devices:
//   `tg-ops test`    runs the case catalogue and reports per case, per device and in total
//                    (last line `N passed, M failed`);
//   `tg-ops perf`    times representative shapes of each op and prints a table of us/run,
//                    GFLOP/s (matrix ops) and GB/s (bytes read + written);
//   `tg-ops support` prints the op x device matrix of Device::SupportsOp on a representative
//                    node of each op (the first catalogue case of that op).
// Each returns the process exit code. Not thread-safe: one command per process.
#ifndef TENSORGRID_TOOLS_TG_OPS_COMMANDS_H_
#define TENSORGRID_TOOLS_TG_OPS_COMMANDS_H_

#include <vector>

#include "core/backend.h"
#include "tools/tg-ops/options.h"

namespace tg::ops_tool {

// 0 when every case passed (and at least one ran), else 1.
int RunTestCommand(const Options& opts, const std::vector<Device*>& devices);
// 0 unless a case failed to run.
int RunPerfCommand(const Options& opts, const std::vector<Device*>& devices);
// 1 when a representative node cannot be built, else 0.
int RunSupportCommand(const Options& opts, const std::vector<Device*>& devices);

}  // namespace tg::ops_tool

#endif  // TENSORGRID_TOOLS_TG_OPS_COMMANDS_H_
