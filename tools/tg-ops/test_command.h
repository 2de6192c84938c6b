// `tg-ops test`: runs the case catalogue on the selected devices and reports per case,
// per device and in total (last line `N passed, M failed`).
#ifndef TENSORGRID_TOOLS_TG_OPS_TEST_COMMAND_H_
#define TENSORGRID_TOOLS_TG_OPS_TEST_COMMAND_H_

#include <vector>

#include "core/backend.h"
#include "tools/tg-ops/options.h"

namespace tg::ops_tool {

// Returns the process exit code: 0 when every case passed (and at least one ran), else 1.
int RunTestCommand(const Options& opts, const std::vector<Device*>& devices);

}  // namespace tg::ops_tool

#endif  // TENSORGRID_TOOLS_TG_OPS_TEST_COMMAND_H_
