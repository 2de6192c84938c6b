#include "server/client_accounts.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "server/memory_reservation.h"

namespace tg::server {

ClientAccount::~ClientAccount() { owner_->Close(client_); }

absl::Status ClientAccount::Take(uint64_t size) {
  if (uint64_t now; !AddWithinLimit(&shared_->held, mem_limit_, size, &now)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "client %s's memory limit of %d bytes (%.1f MiB) exceeded: its sessions hold %d "
        "bytes, %d asked; the server's --client-mem-limit sets what one client's sessions "
        "may hold together (0 = no limit)",
        client_, mem_limit_, static_cast<double>(mem_limit_) / (1 << 20), now, size));
  }
  return absl::OkStatus();
}

void ClientAccount::Give(uint64_t size) { shared_->held -= size; }

uint64_t ClientAccount::held() const { return shared_->held.load(); }

absl::StatusOr<std::shared_ptr<ClientAccount>> ClientAccounts::Open(const std::string& client) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<ClientAccount::Shared>& shared = open_[client];
  if (shared == nullptr) shared = std::make_shared<ClientAccount::Shared>();
  if (max_sessions_ != 0 && shared->sessions >= max_sessions_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "client %s has %d sessions open, the most one client may have (the server's "
        "--client-max-sessions %d); close one first",
        client, shared->sessions, max_sessions_));
  }
  ++shared->sessions;
  // The constructor is private (sessions are counted only through here): no make_shared.
  return std::shared_ptr<ClientAccount>(new ClientAccount(client, mem_limit_, this, shared));
}

void ClientAccounts::Close(const std::string& client) {
  absl::MutexLock lock(&mu_);
  auto it = open_.find(client);
  if (it == open_.end()) return;
  if (--it->second->sessions == 0) open_.erase(it);
}

size_t ClientAccounts::clients() const {
  absl::MutexLock lock(&mu_);
  return open_.size();
}

}  // namespace tg::server
