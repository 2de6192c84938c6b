// Failover plans: when a remote device's server is lost mid-generation, which server an
// error reports lost and what plan is left without it: the same split mode over the remaining
// devices, their -ts proportions renormalised. FailoverModel (models/failover_model.h)
// reloads the model on that plan and FailoverSession (models/failover_session.h) rebuilds
// the KV cache on it. Stateless functions; thread-safe.
#ifndef TENSORGRID_MODELS_FAILOVER_PLAN_H_
#define TENSORGRID_MODELS_FAILOVER_PLAN_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/split_mode.h"

namespace tg {

// The endpoint (host:port) of a remote device in `plan` that `error` reports lost: its
// typed identity (core/lost_endpoint.h, set where the error was made, by the client or by a
// server that lost a peer), never its message. nullopt when the error is not a lost server's
// (a bad argument, a full context) or names a server outside `plan`.
std::optional<std::string> LostServer(const absl::Status& error, const DevicePlan& plan);

// `plan` without the devices of the server at `endpoint`; -ts renormalised over the rest.
// FAILED_PRECONDITION (naming the server and `error`) when no device is left.
absl::StatusOr<DevicePlan> PlanWithout(const DevicePlan& plan, const std::string& endpoint,
                                       const absl::Status& error);

// "RPC[a]/0,RPC[b]/0 (-sm layer -ts 0.50,0.50)": where a plan runs, for the recovery line.
std::string DescribePlan(const DevicePlan& plan);

}  // namespace tg

#endif  // TENSORGRID_MODELS_FAILOVER_PLAN_H_
