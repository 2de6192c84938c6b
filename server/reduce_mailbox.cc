#include "server/reduce_mailbox.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"

namespace tg::server {

absl::Status ReduceMailbox::Put(PieceKey key, std::string data) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  if (now - last_sweep_ > kStaleAfter / 4) DropStaleLocked(now);
  if (held_ + data.size() > kMaxHeldBytes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("peer_reduce: %d bytes already held for collectives not yet run here "
                        "(limit %d); the piece of %d bytes is refused",
                        held_, kMaxHeldBytes, data.size()));
  }
  const size_t n = data.size();
  auto [it, inserted] = pieces_.try_emplace(std::move(key), Piece{std::move(data), now});
  if (!inserted) {
    return absl::AlreadyExistsError(
        absl::StrFormat("peer_reduce: collective %d step %d part %d came twice",
                        it->first.collective, it->first.step, it->first.part));
  }
  held_ += n;
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReduceMailbox::Take(const PieceKey& key, absl::Time deadline,
                                                absl::Duration poll,
                                                absl::FunctionRef<absl::Status()> check) {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto there = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pieces_.contains(key); };
      mu_.AwaitWithDeadline(absl::Condition(&there), std::min(deadline, absl::Now() + poll));
      auto it = pieces_.find(key);
      if (it != pieces_.end()) {
        std::string data = std::move(it->second.data);
        held_ -= data.size();
        pieces_.erase(it);
        return data;
      }
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrFormat("all-reduce %d: no data from rank %d for step %d in time", key.collective,
                          key.from_rank, key.step));
    }
    if (absl::Status s = check(); !s.ok()) return s;
  }
}

void ReduceMailbox::Drop(const std::string& grant, uint64_t collective) {
  absl::MutexLock lock(&mu_);
  for (auto it = pieces_.begin(); it != pieces_.end();) {
    if (it->first.grant == grant && it->first.collective == collective) {
      held_ -= it->second.data.size();
      pieces_.erase(it++);
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
      held_ -= it->second.data.size();
      pieces_.erase(it++);
    } else {
      ++it;
    }
  }
}

}  // namespace tg::server
