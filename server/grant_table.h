// GrantTable: the server-wide table of peer-read grants (GrantPeerRead -> PeerCopy, and the
// names of the pieces peers deliver: PeerDeliver, PeerReduce). A grant is a random 128-bit
// capability naming one session buffer; it dies with the buffer's handle. Each grant also
// names the MailboxAccount of the session that made it: what peers deliver for the grant is
// charged there, so a session's pieces count against its own memory and never against
// another tenant's. The mailboxes holding pieces listen for revocations (RevokeListener) and
// drop a grant's pieces, uncharged, the moment it is revoked (buffer freed, session ended).
// Thread-safe.
#ifndef TENSORGRID_SERVER_GRANT_TABLE_H_
#define TENSORGRID_SERVER_GRANT_TABLE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/memory_reservation.h"
#include "server/session_buffer.h"

namespace tg::server {

class Metrics;

// MailboxAccount: the bytes of the pieces peers delivered for one session's grants and that
// still wait in a mailbox (PeerPushes, CollectiveRunner). Each piece is charged through the
// session's own memory charge (Session::ReserveMemory, so --session-mem-limit and the
// server's budget apply) and against kMaxHeldBytes; Refund gives it back when the piece is
// taken or dropped. Close (the session ends) refunds what is still held and refuses later
// charges, so nothing reaches the session after it. Thread-safe.
class MailboxAccount {
 public:
  // Pieces one session may hold at most, whatever its memory limit: a session's collectives
  // and pushes in flight need a few tensors' worth (a 512-token batch of a 16k-wide model is
  // 32 MiB a tensor); more is a peer, or the session itself, parking what nobody takes.
  static constexpr uint64_t kMaxHeldBytes = uint64_t{512} << 20;

  // Charges `size` bytes to the session (a committed reservation) or says why not.
  using Reserve = absl::AnyInvocable<absl::StatusOr<MemoryReservation>(uint64_t size)>;
  // Gives `size` charged bytes back to the session.
  using Release = absl::AnyInvocable<void(uint64_t size)>;

  // `session` names the session in messages (its log id); `metrics` (may be null) counts
  // tg_peer_mailbox_bytes.
  MailboxAccount(std::string session, Reserve reserve, Release release, Metrics* metrics);
  ~MailboxAccount();
  MailboxAccount(const MailboxAccount&) = delete;
  MailboxAccount& operator=(const MailboxAccount&) = delete;

  // Charges a piece of `size` bytes: RESOURCE_EXHAUSTED naming the bytes held, the piece and
  // the limit (kMaxHeldBytes, or the session's --session-mem-limit) when it would pass
  // either; NOT_FOUND once closed.
  absl::Status Charge(uint64_t size) ABSL_LOCKS_EXCLUDED(mu_);
  // A charged piece left the mailbox (a no-op once closed: Close refunded everything).
  void Refund(uint64_t size) ABSL_LOCKS_EXCLUDED(mu_);
  void Close() ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t held() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void ReleaseLocked(uint64_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string session_;
  Metrics* const metrics_;
  mutable absl::Mutex mu_;
  Reserve reserve_ ABSL_GUARDED_BY(mu_);
  Release release_ ABSL_GUARDED_BY(mu_);
  uint64_t held_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// One grant: the buffer it names and the account its pieces are charged to.
struct GrantRecord {
  std::weak_ptr<SessionBuffer> buffer;
  std::shared_ptr<MailboxAccount> account;  // null: pieces are not charged (tests).
  std::atomic<bool> revoked{false};
};

// What wants to know that a grant is gone (a mailbox dropping its pieces). Called outside the
// table's lock, never concurrently with its own RemoveListener.
class RevokeListener {
 public:
  virtual ~RevokeListener() = default;
  virtual void Revoked(const std::string& grant) = 0;
};

class GrantTable {
 public:
  // A new grant for `buffer` (32 hex digits), whose delivered pieces `account` pays for.
  std::string Grant(const std::shared_ptr<SessionBuffer>& buffer,
                    std::shared_ptr<MailboxAccount> account = nullptr) ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets the grant and tells every listener (which drop its pieces) before returning.
  void Revoke(const std::string& grant) ABSL_LOCKS_EXCLUDED(mu_, listeners_mu_);
  // The buffer, kept alive by the caller while it reads; nullptr for an unknown grant.
  std::shared_ptr<SessionBuffer> Find(const std::string& grant) const ABSL_LOCKS_EXCLUDED(mu_);
  // The grant's record; nullptr for an unknown grant or one whose buffer is gone.
  std::shared_ptr<GrantRecord> FindRecord(const std::string& grant) const ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

  // `listener` must stay valid until RemoveListener returns.
  void AddListener(RevokeListener* listener) ABSL_LOCKS_EXCLUDED(listeners_mu_);
  void RemoveListener(RevokeListener* listener) ABSL_LOCKS_EXCLUDED(listeners_mu_);

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<GrantRecord>> grants_ ABSL_GUARDED_BY(mu_);
  // Held while listeners are told, so that one is never removed while it is being called.
  absl::Mutex listeners_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::vector<RevokeListener*> listeners_ ABSL_GUARDED_BY(listeners_mu_);
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_GRANT_TABLE_H_
