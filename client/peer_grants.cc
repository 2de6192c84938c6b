#include "client/peer_grants.h"

#include <utility>

namespace tg::rpc {

std::optional<std::string> PeerGrants::Find(uint64_t buffer) const {
  absl::MutexLock lock(&mu_);
  auto it = grants_.find(buffer);
  if (it == grants_.end()) return std::nullopt;
  return it->second;
}

void PeerGrants::Remember(uint64_t buffer, std::string grant) {
  absl::MutexLock lock(&mu_);
  grants_[buffer] = std::move(grant);
}

void PeerGrants::Forget(uint64_t buffer) {
  absl::MutexLock lock(&mu_);
  grants_.erase(buffer);
}

}  // namespace tg::rpc
