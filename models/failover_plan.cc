#include "models/failover_plan.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/backend.h"
#include "core/lost_endpoint.h"

namespace tg {
namespace {

// The endpoint of a remote device ("RPC[host:port]/N"); empty for a local one.
std::string EndpointOf(const Device* device) {
  const absl::string_view name = device->name();
  if (!absl::StartsWith(name, "RPC[")) return "";
  const size_t end = name.find("]/");
  return end == absl::string_view::npos ? "" : std::string(name.substr(4, end - 4));
}

}  // namespace

std::optional<std::string> LostServer(const absl::Status& error, const DevicePlan& plan) {
  // Only the typed identity counts (core/lost_endpoint.h): the message is for people, and a
  // reply of a server left may well name a lost one that is not of this plan.
  const std::optional<std::string> lost = LostEndpoint(error);
  if (!lost.has_value()) return std::nullopt;
  for (const Device* d : plan.devices) {
    if (EndpointOf(d) == *lost) return lost;
  }
  return std::nullopt;
}

absl::StatusOr<DevicePlan> PlanWithout(const DevicePlan& plan, const std::string& endpoint,
                                       const absl::Status& error) {
  DevicePlan left;
  left.mode = plan.mode;
  left.expert_split = plan.expert_split;
  float total = 0;
  for (size_t i = 0; i < plan.devices.size(); ++i) {
    if (EndpointOf(plan.devices[i]) == endpoint) continue;
    left.devices.push_back(plan.devices[i]);
    const float p = i < plan.proportions.size() ? plan.proportions[i] : 1.0f;
    left.proportions.push_back(p);
    total += p;
  }
  if (left.devices.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("rpc-server ", endpoint,
                     " was lost and no other device is left to run on: ", error.message()));
  }
  for (float& p : left.proportions) p = total > 0 ? p / total : 1.0f / left.devices.size();
  if (left.devices.size() == 1) left.mode = SplitMode::kNone;
  return left;
}

std::string DescribePlan(const DevicePlan& plan) {
  std::vector<std::string> names, shares;
  for (const Device* d : plan.devices) names.push_back(std::string(d->name()));
  for (float p : plan.proportions) shares.push_back(absl::StrFormat("%.2f", p));
  return absl::StrCat(absl::StrJoin(names, ","), " (-sm ", SplitModeName(plan.mode), " -ts ",
                      absl::StrJoin(shares, ","), ")");
}

}  // namespace tg
