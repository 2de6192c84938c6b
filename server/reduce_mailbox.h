// ReduceMailbox: the pieces peer servers pushed here (PeerReduce pieces of all-reduces, and
// PeerDeliver pieces of pushes), held until this server's part of the same work takes them.
// A piece may arrive before that part starts (a faster peer), hence a mailbox rather than a
// rendezvous. Pieces are keyed by the receiving session's grant, so one session never takes
// another's, and each is charged to the session that made the grant (its MailboxAccount:
// that session's memory limit and a cap of its own), so one tenant's pieces never crowd out
// another's. A grant's pieces are dropped, uncharged, when it is revoked (the buffer freed,
// the session ended); pieces nobody took (a collective that failed here) are dropped when it
// ends; a piece filed with the key of the session that sent it goes when that sender ends
// (DropSender: a push or all-reduce piece nobody will take), and a piece of that sender that
// comes later (it was on its way when the end was told) is refused; failing all that, after
// kStaleAfter. Thread-safe.
#ifndef TENSORGRID_SERVER_REDUCE_MAILBOX_H_
#define TENSORGRID_SERVER_REDUCE_MAILBOX_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/grant_table.h"

namespace tg::server {

struct PieceKey {
  std::string grant;
  uint64_t collective = 0;
  uint32_t step = 0;
  uint32_t part = 0;
  uint32_t from_rank = 0;

  template <typename H>
  friend H AbslHashValue(H h, const PieceKey& k) {
    return H::combine(std::move(h), k.grant, k.collective, k.step, k.part, k.from_rank);
  }
  friend bool operator==(const PieceKey& a, const PieceKey& b) {
    return std::tie(a.grant, a.collective, a.step, a.part, a.from_rank) ==
           std::tie(b.grant, b.collective, b.step, b.part, b.from_rank);
  }
};

class ReduceMailbox final : public RevokeListener {
 public:
  // Pieces held at most, in bytes, of grants that name no account (a mailbox without a
  // grant table: tests and the fuzzer). Accounted pieces are capped per session instead
  // (MailboxAccount::kMaxHeldBytes and the session's memory limit).
  static constexpr size_t kMaxUnaccountedBytes = size_t{512} << 20;
  static constexpr absl::Duration kStaleAfter = absl::Minutes(2);
  // Ended senders remembered at most (their late pieces refused); past it the oldest is
  // forgotten, and a piece of it still to come waits for kStaleAfter or its grant's end.
  static constexpr size_t kMaxEndedSenders = 4096;

  // `grants` (may be null; else it must outlive the mailbox) names the grants pieces may be
  // put for and the accounts they are charged to; the mailbox listens for its revocations.
  explicit ReduceMailbox(GrantTable* grants = nullptr);
  ~ReduceMailbox() override;
  ReduceMailbox(const ReduceMailbox&) = delete;
  ReduceMailbox& operator=(const ReduceMailbox&) = delete;

  // Files a piece. NOT_FOUND for a grant the table does not know (or revoked meanwhile);
  // RESOURCE_EXHAUSTED, naming the numbers, when the receiving session's account (or, with
  // no account, kMaxUnaccountedBytes) would pass its cap; ALREADY_EXISTS for a piece already
  // held; FAILED_PRECONDITION for a piece of a sender that ended (DropSender). `what` starts
  // every message ("peer_reduce", "peer_deliver"). `sender` (may be empty: unknown) names the
  // session that sent the piece, for DropSender.
  absl::Status Put(PieceKey key, std::string data, absl::string_view what = "peer_reduce",
                   std::string sender = {}) ABSL_LOCKS_EXCLUDED(mu_);
  // The first `check` of a wait comes this soon (then every `poll`): a peer already gone (a
  // collective queued behind the one that lost it) fails the wait at once, not after a poll.
  static constexpr absl::Duration kFirstCheck = absl::Milliseconds(10);
  // Waits for the piece until `deadline`; after kFirstCheck (or `poll` when shorter), then
  // every `poll`, it calls `check`, and gives up with its error (a peer known to be gone).
  // DEADLINE_EXCEEDED names the wait.
  absl::StatusOr<std::string> Take(const PieceKey& key, absl::Time deadline, absl::Duration poll,
                                   absl::FunctionRef<absl::Status()> check)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The piece if it is here, without waiting.
  std::optional<std::string> TryTake(const PieceKey& key) ABSL_LOCKS_EXCLUDED(mu_);
  // What a Take's `check` returns once the waiting session has ended (CANCELLED, naming the
  // command that waited and the peer it waited for).
  static absl::Status SessionEnded(absl::string_view what, absl::string_view peer);
  // Drops every piece of (grant, collective).
  void Drop(const std::string& grant, uint64_t collective) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops one piece (a delivery refused whole after part of it was filed).
  void Discard(const PieceKey& key) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops, uncharged, every piece `sender` (not empty) sent that nobody took: the sending
  // session ended, so nothing will await them; its pieces put later are refused. Returns the
  // bytes dropped.
  size_t DropSender(absl::string_view sender) ABSL_LOCKS_EXCLUDED(mu_);
  // RevokeListener: drops every piece of `grant`.
  void Revoked(const std::string& grant) override ABSL_LOCKS_EXCLUDED(mu_);
  size_t held_bytes() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Piece {
    std::string data;
    size_t size = 0;  // what was charged (Take moves data out before the erase).
    absl::Time arrived;
    std::shared_ptr<MailboxAccount> account;  // null: counted in unaccounted_.
    std::string sender;                       // empty: not known.
  };
  using Pieces = absl::flat_hash_map<PieceKey, Piece>;
  // The piece's data, erased (its bytes given back); nullopt when it is not here.
  std::optional<std::string> TakeLocked(const PieceKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Erases the piece at `it` (other iterators stay valid), giving its bytes back.
  void EraseLocked(Pieces::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropStaleLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  GrantTable* const grants_;
  mutable absl::Mutex mu_;
  Pieces pieces_ ABSL_GUARDED_BY(mu_);
  size_t held_ ABSL_GUARDED_BY(mu_) = 0;
  size_t unaccounted_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_sweep_ ABSL_GUARDED_BY(mu_);
  // Senders DropSender was told of, oldest first in ended_order_ (at most kMaxEndedSenders).
  absl::flat_hash_set<std::string> ended_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> ended_order_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_REDUCE_MAILBOX_H_
