// Typed failure identity: an error that means "the server at this endpoint is lost" (its
// stream broke or stalled, it cannot be reached, a server could not reach it as a peer)
// carries the endpoint ("host:port") as an absl::Status payload under kLostEndpointTypeUrl,
// set where the error is made (client/, server/peer_client). Whoever acts on a loss
// (failover, models/failover_plan.h) reads the payload, never the message, which stays
// written for people. A status reworded with more context keeps its payloads only when the
// new one is built with KeepIdentity. Stateless functions; thread-safe.
#ifndef TENSORGRID_CORE_LOST_ENDPOINT_H_
#define TENSORGRID_CORE_LOST_ENDPOINT_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tg {

// The payload's type URL; its value is the endpoint as the client dialed it ("host:port").
inline constexpr absl::string_view kLostEndpointTypeUrl = "type.tensorgrid/lost_endpoint";

// Marks `status` as reporting `endpoint` lost (replacing an earlier mark). An OK status
// stays OK (absl ignores payloads on OK), as does an empty endpoint.
void SetLostEndpoint(absl::Status& status, absl::string_view endpoint);
// `status` marked, for `return WithLostEndpoint(absl::UnavailableError(...), endpoint);`.
absl::Status WithLostEndpoint(absl::Status status, absl::string_view endpoint);

// The endpoint `status` reports lost; nullopt when it reports none (OK, or any other error).
std::optional<std::string> LostEndpoint(const absl::Status& status);

// `reworded` (the same failure told with more context) with every payload of `cause` that it
// does not have itself, so that a loss reported deeper down is still one when it is wrapped.
absl::Status KeepIdentity(const absl::Status& cause, absl::Status reworded);

}  // namespace tg

#endif  // TENSORGRID_CORE_LOST_ENDPOINT_H_
