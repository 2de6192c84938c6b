#include "tools/common/failover.h"

#include "absl/strings/str_format.h"
#include "models/failover_plan.h"

namespace tg {

std::string RecoveryLine(absl::string_view tool, absl::string_view where,
                         const FailoverEvent& event) {
  return absl::StrFormat("%s: rpc-server %s lost %s (%s); recovered in %.2f s, now on %s", tool,
                         event.server, where, event.error.message(), event.seconds,
                         DescribePlan(event.plan));
}

}  // namespace tg
