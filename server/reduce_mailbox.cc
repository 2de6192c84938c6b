#include "server/reduce_mailbox.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tg::server {

ReduceMailbox::ReduceMailbox(GrantTable* grants) : grants_(grants) {
  if (grants_ != nullptr) grants_->AddListener(this);
}

ReduceMailbox::~ReduceMailbox() {
  if (grants_ != nullptr) grants_->RemoveListener(this);
  absl::MutexLock lock(&mu_);
  for (auto it = pieces_.begin(); it != pieces_.end();) EraseLocked(it++);
}

absl::Status ReduceMailbox::Put(PieceKey key, std::string data, absl::string_view what,
                                std::string sender) {
  const size_t n = data.size();
  std::shared_ptr<GrantRecord> record;
  std::shared_ptr<MailboxAccount> account;
  if (grants_ != nullptr) {
    record = grants_->FindRecord(key.grant);
    if (record == nullptr)
      return absl::NotFoundError(absl::StrCat(what, ": unknown or revoked grant"));
    account = record->account;
  }
  // Charged before the piece is filed, outside mu_ (the session's charge may wait on locks of
  // its own); every refusal below gives it back.
  if (account != nullptr) {
    if (absl::Status s = account->Charge(n); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
    }
  }
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  if (now - last_sweep_ > kStaleAfter / 4) DropStaleLocked(now);
  if (account == nullptr && unaccounted_ + n > kMaxUnaccountedBytes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s: %d bytes already held for work not yet run here (limit %d); the "
                        "piece of %d bytes is refused",
                        what, unaccounted_, kMaxUnaccountedBytes, n));
  }
  // A piece of a sender whose end was told (it was on its way then) would wait for nobody.
  if (!sender.empty() && ended_.contains(sender)) {
    if (account != nullptr) account->Refund(n);
    return absl::FailedPreconditionError(
        absl::StrCat(what,
                     ": the session that sent this piece has ended (its pieces here were "
                     "dropped)"));
  }
  auto [it, inserted] = pieces_.try_emplace(
      std::move(key), Piece{std::move(data), n, now, account, std::move(sender)});
  if (!inserted) {
    if (account != nullptr) account->Refund(n);
    return absl::AlreadyExistsError(absl::StrFormat("%s: collective %d step %d part %d came twice",
                                                    what, it->first.collective, it->first.step,
                                                    it->first.part));
  }
  held_ += n;
  if (account == nullptr) unaccounted_ += n;
  // A revocation whose sweep ran before this piece was filed: the piece goes now.
  if (record != nullptr && record->revoked) {
    EraseLocked(it);
    return absl::NotFoundError(absl::StrCat(what, ": unknown or revoked grant"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReduceMailbox::Take(const PieceKey& key, absl::Time deadline,
                                                absl::Duration poll,
                                                absl::FunctionRef<absl::Status()> check) {
  for (absl::Duration wait = std::min(poll, kFirstCheck);; wait = poll) {
    {
      absl::MutexLock lock(&mu_);
      auto there = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pieces_.contains(key); };
      mu_.AwaitWithDeadline(absl::Condition(&there), std::min(deadline, absl::Now() + wait));
      if (std::optional<std::string> data = TakeLocked(key)) return *std::move(data);
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrFormat("all-reduce %d: no data from rank %d for step %d in time", key.collective,
                          key.from_rank, key.step));
    }
    if (absl::Status s = check(); !s.ok()) return s;
  }
}

std::optional<std::string> ReduceMailbox::TryTake(const PieceKey& key) {
  absl::MutexLock lock(&mu_);
  return TakeLocked(key);
}

std::optional<std::string> ReduceMailbox::TakeLocked(const PieceKey& key) {
  auto it = pieces_.find(key);
  if (it == pieces_.end()) return std::nullopt;
  std::string data = std::move(it->second.data);
  EraseLocked(it);
  return data;
}

void ReduceMailbox::EraseLocked(Pieces::iterator it) {
  const Piece& p = it->second;
  held_ -= p.size;
  if (p.account != nullptr) {
    p.account->Refund(p.size);
  } else {
    unaccounted_ -= p.size;
  }
  pieces_.erase(it);
}

void ReduceMailbox::Drop(const std::string& grant, uint64_t collective) {
  absl::MutexLock lock(&mu_);
  for (auto it = pieces_.begin(); it != pieces_.end();) {
    if (it->first.grant == grant && it->first.collective == collective) {
      EraseLocked(it++);
    } else {
      ++it;
    }
  }
}

void ReduceMailbox::Discard(const PieceKey& key) {
  absl::MutexLock lock(&mu_);
  if (auto it = pieces_.find(key); it != pieces_.end()) EraseLocked(it);
}

size_t ReduceMailbox::DropSender(absl::string_view sender) {
  if (sender.empty()) return 0;
  absl::MutexLock lock(&mu_);
  if (ended_.emplace(sender).second) {
    ended_order_.emplace_back(sender);
    if (ended_order_.size() > kMaxEndedSenders) {
      ended_.erase(ended_order_.front());
      ended_order_.pop_front();
    }
  }
  size_t dropped = 0;
  for (auto it = pieces_.begin(); it != pieces_.end();) {
    if (it->second.sender == sender) {
      dropped += it->second.size;
      EraseLocked(it++);
    } else {
      ++it;
    }
  }
  return dropped;
}

void ReduceMailbox::Revoked(const std::string& grant) {
  absl::MutexLock lock(&mu_);
  for (auto it = pieces_.begin(); it != pieces_.end();) {
    if (it->first.grant == grant) {
      EraseLocked(it++);
    } else {
      ++it;
    }
  }
}

size_t ReduceMailbox::held_bytes() const {
  absl::MutexLock lock(&mu_);
  return held_;
}

void ReduceMailbox::DropStaleLocked(absl::Time now) {
  last_sweep_ = now;
  for (auto it = pieces_.begin(); it != pieces_.end();) {
    if (now - it->second.arrived > kStaleAfter) {
      EraseLocked(it++);
    } else {
      ++it;
    }
  }
}

absl::Status ReduceMailbox::SessionEnded(absl::string_view what, absl::string_view peer) {
  return absl::CancelledError(
      absl::StrCat(what, ": the session ended while waiting for a piece from ", peer));
}

}  // namespace tg::server
