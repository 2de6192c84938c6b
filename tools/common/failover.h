// The line a tool prints when --rpc-failover recovered from a lost rpc-server
// (FailoverSession, FailoverModel: models/failover_*.h): which server was lost, where in
// the tool's work, why, how long recovery took and where the work runs now. Stateless.
#ifndef TENSORGRID_TOOLS_COMMON_FAILOVER_H_
#define TENSORGRID_TOOLS_COMMON_FAILOVER_H_

#include <string>

#include "absl/strings/string_view.h"
#include "models/failover_model.h"

namespace tg {

// "TOOL: rpc-server H:P lost WHERE (why); recovered in 0.43 s, now on RPC[..]/0,... (-sm
// layer -ts 0.50,0.50)", without a newline. `where`: "at token 20", "in tg128 repetition 3".
std::string RecoveryLine(absl::string_view tool, absl::string_view where,
                         const FailoverEvent& event);

}  // namespace tg

#endif  // TENSORGRID_TOOLS_COMMON_FAILOVER_H_
