#include "core/lost_endpoint.h"

#include "absl/strings/cord.h"

namespace tg {

void SetLostEndpoint(absl::Status& status, absl::string_view endpoint) {
  if (status.ok() || endpoint.empty()) return;
  status.SetPayload(kLostEndpointTypeUrl, absl::Cord(endpoint));
}

absl::Status WithLostEndpoint(absl::Status status, absl::string_view endpoint) {
  SetLostEndpoint(status, endpoint);
  return status;
}

std::optional<std::string> LostEndpoint(const absl::Status& status) {
  const auto endpoint = status.GetPayload(kLostEndpointTypeUrl);  // an absl::optional.
  if (!endpoint.has_value() || endpoint->empty()) return std::nullopt;
  return std::string(*endpoint);
}

absl::Status KeepIdentity(const absl::Status& cause, absl::Status reworded) {
  if (reworded.ok()) return reworded;
  cause.ForEachPayload([&reworded](absl::string_view type_url, const absl::Cord& value) {
    if (!reworded.GetPayload(type_url).has_value()) reworded.SetPayload(type_url, value);
  });
  return reworded;
}

}  // namespace tg
