// ReduceMailbox: the pieces of all-reduces that peer servers pushed here (PeerReduce), held
// until this server's part of the same collective takes them. A piece may arrive before
// that part starts (a faster peer), hence a mailbox rather than a rendezvous. Pieces are
// keyed by the receiving session's grant, so one session never takes another's. Held bytes
// are capped; pieces nobody took (a collective that failed here) are dropped when it ends
// and, failing that, after kStaleAfter. Thread-safe.
#ifndef TENSORGRID_SERVER_REDUCE_MAILBOX_H_
#define TENSORGRID_SERVER_REDUCE_MAILBOX_H_

#include <cstdint>
#include <string>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

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

class ReduceMailbox {
 public:
  // Pieces held at most, in bytes: a client's collectives in flight need a few of their
  // tensors' worth; more is a peer pushing what nobody takes.
  static constexpr size_t kMaxHeldBytes = size_t{512} << 20;
  static constexpr absl::Duration kStaleAfter = absl::Minutes(2);

  // RESOURCE_EXHAUSTED past kMaxHeldBytes; ALREADY_EXISTS for a piece already held.
  absl::Status Put(PieceKey key, std::string data) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits for the piece until `deadline`; every `poll` it calls `check`, and gives up with
  // its error (a peer known to be gone). DEADLINE_EXCEEDED names the wait.
  absl::StatusOr<std::string> Take(const PieceKey& key, absl::Time deadline, absl::Duration poll,
                                   absl::FunctionRef<absl::Status()> check)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Drops every piece of (grant, collective).
  void Drop(const std::string& grant, uint64_t collective) ABSL_LOCKS_EXCLUDED(mu_);
  size_t held_bytes() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Piece {
    std::string data;
    absl::Time arrived;
  };
  void DropStaleLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<PieceKey, Piece> pieces_ ABSL_GUARDED_BY(mu_);
  size_t held_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_sweep_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_REDUCE_MAILBOX_H_
