#include "server/grant_table.h"

#include "server/random_id.h"

namespace tg::server {

std::string GrantTable::Grant(const std::shared_ptr<SessionBuffer>& buffer) {
  std::string grant = RandomHex(16);
  absl::MutexLock lock(&mu_);
  grants_[grant] = buffer;
  return grant;
}

void GrantTable::Revoke(const std::string& grant) {
  absl::MutexLock lock(&mu_);
  grants_.erase(grant);
}

std::shared_ptr<SessionBuffer> GrantTable::Find(const std::string& grant) const {
  absl::MutexLock lock(&mu_);
  auto it = grants_.find(grant);
  return it == grants_.end() ? nullptr : it->second.lock();
}

size_t GrantTable::size() const {
  absl::MutexLock lock(&mu_);
  return grants_.size();
}

}  // namespace tg::server
