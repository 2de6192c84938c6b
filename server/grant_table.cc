#include "server/grant_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "server/metrics.h"
#include "server/random_id.h"

namespace tg::server {

MailboxAccount::MailboxAccount(std::string session, Reserve reserve, Release release,
                               Metrics* metrics)
    : session_(std::move(session)),
      metrics_(metrics),
      reserve_(std::move(reserve)),
      release_(std::move(release)) {}

MailboxAccount::~MailboxAccount() { Close(); }

absl::Status MailboxAccount::Charge(uint64_t size) {
  absl::MutexLock lock(&mu_);
  if (closed_) {
    return absl::NotFoundError(
        absl::StrFormat("session %s has ended: its pieces are not kept", session_));
  }
  if (size > kMaxHeldBytes - std::min(held_, kMaxHeldBytes)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "session %s already holds %d bytes of pieces nobody took yet; a piece of %d more would "
        "pass the %d bytes one session may hold (take or drop pieces first)",
        session_, held_, size, kMaxHeldBytes));
  }
  if (reserve_) {
    absl::StatusOr<MemoryReservation> reservation = reserve_(size);
    if (!reservation.ok()) {
      return absl::Status(
          reservation.status().code(),
          absl::StrFormat("session %s holds %d bytes of pieces nobody took yet; a piece of %d "
                          "more is refused: %s",
                          session_, held_, size, reservation.status().message()));
    }
    reservation->Commit();  // Refund gives the bytes back.
  }
  held_ += size;
  if (metrics_ != nullptr) metrics_->PeerMailboxBytes(static_cast<double>(size));
  return absl::OkStatus();
}

void MailboxAccount::ReleaseLocked(uint64_t size) {
  size = std::min(size, held_);
  held_ -= size;
  if (release_) release_(size);
  if (metrics_ != nullptr) metrics_->PeerMailboxBytes(-static_cast<double>(size));
}

void MailboxAccount::Refund(uint64_t size) {
  absl::MutexLock lock(&mu_);
  if (!closed_) ReleaseLocked(size);
}

void MailboxAccount::Close() {
  absl::MutexLock lock(&mu_);
  if (closed_) return;
  ReleaseLocked(held_);
  closed_ = true;
  // What they capture (the session) may go once this returns.
  reserve_ = nullptr;
  release_ = nullptr;
}

uint64_t MailboxAccount::held() const {
  absl::MutexLock lock(&mu_);
  return held_;
}

std::string GrantTable::Grant(const std::shared_ptr<SessionBuffer>& buffer,
                              std::shared_ptr<MailboxAccount> account) {
  auto record = std::make_shared<GrantRecord>();
  record->buffer = buffer;
  record->account = std::move(account);
  std::string grant = RandomHex(16);
  absl::MutexLock lock(&mu_);
  grants_[grant] = std::move(record);
  return grant;
}

void GrantTable::Revoke(const std::string& grant) {
  {
    absl::MutexLock lock(&mu_);
    auto it = grants_.find(grant);
    if (it == grants_.end()) return;
    // Set before the listeners look: a piece filed after their sweep sees it and goes too.
    it->second->revoked = true;
    grants_.erase(it);
  }
  absl::MutexLock lock(&listeners_mu_);
  for (RevokeListener* l : listeners_) l->Revoked(grant);
}

std::shared_ptr<SessionBuffer> GrantTable::Find(const std::string& grant) const {
  absl::MutexLock lock(&mu_);
  auto it = grants_.find(grant);
  return it == grants_.end() ? nullptr : it->second->buffer.lock();
}

std::shared_ptr<GrantRecord> GrantTable::FindRecord(const std::string& grant) const {
  absl::MutexLock lock(&mu_);
  auto it = grants_.find(grant);
  if (it == grants_.end() || it->second->buffer.expired()) return nullptr;
  return it->second;
}

size_t GrantTable::size() const {
  absl::MutexLock lock(&mu_);
  return grants_.size();
}

void GrantTable::AddListener(RevokeListener* listener) {
  absl::MutexLock lock(&listeners_mu_);
  listeners_.push_back(listener);
}

void GrantTable::RemoveListener(RevokeListener* listener) {
  absl::MutexLock lock(&listeners_mu_);
  listeners_.erase(std::remove(listeners_.begin(), listeners_.end(), listener), listeners_.end());
}

}  // namespace tg::server
