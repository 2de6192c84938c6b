// PeerPushes: rpc-server's side of pushes between servers (tensorgrid.proto's PeerPush,
// AwaitPush and PeerDeliver), which let a layer boundary between two servers cost the
// decode step one message from server to server instead of a pull's round trip. Send runs a
// session's PeerPush on the source server: it reads the pieces (on the lanes of their
// buffers, so in the session's command order) and delivers them in one PeerDeliver call,
// waiting for its answer, so that an unreachable destination is the command's error.
// Receive files delivered pieces in a mailbox, for grants of this server only (the grant the
// destination session made is the capability). Await runs a session's AwaitPush: it takes
// its piece, waiting for it while watching the source's channel (a source that is gone is
// "peer unreachable" within about a second), and writes it into the buffer. Peers are
// reached through PeerClient (--peers, the peer TLS options, this server's token).
// Thread-safe.
#ifndef TENSORGRID_SERVER_PEER_PUSHES_H_
#define TENSORGRID_SERVER_PEER_PUSHES_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/protocol.h"
#include "server/reduce_mailbox.h"
#include "server/session_buffer.h"
#include "tensorgrid/v1/tensorgrid.pb.h"

namespace tg::server {

class GrantTable;
class Metrics;
class PeerClient;

class PeerPushes {
 public:
  // Bytes of one PeerPush (and of one piece) at most: they travel in one gRPC message.
  static constexpr uint64_t kMaxPushBytes = rpc::kMaxInlineBytes;
  // Pieces of one PeerPush at most: a layer boundary is a few tensors.
  static constexpr int kMaxPieces = 64;
  // How long an AwaitPush waits for its piece: the source may still be computing what comes
  // before its push (a long prompt on a slow device), as an all-reduce waits for a peer.
  static constexpr absl::Duration kPieceWait = absl::Seconds(60);
  // How often a waiting AwaitPush looks at the source's channel.
  static constexpr absl::Duration kPeerPoll = absl::Milliseconds(200);
  // How long one PeerDeliver may take.
  static constexpr absl::Duration kDeliverDeadline = absl::Seconds(30);
  // How long a PeerDeliver that found the channel down waits for it to dial again (within
  // rpc::kMaxReconnectBackoffMs, plus gRPC's jitter of a fifth).
  static constexpr absl::Duration kReconnectWait = absl::Milliseconds(1500);

  // `grants` must outlive this; `peers` (null: Send is UNIMPLEMENTED and Await does not
  // watch the source) and `metrics` may be null. `piece_wait` replaces kPieceWait (the
  // fuzzer, which has no peer to wait for).
  PeerPushes(PeerClient* peers, GrantTable* grants, Metrics* metrics,
             absl::Duration piece_wait = kPieceWait)
      : peers_(peers),
        grants_(grants),
        metrics_(metrics),
        piece_wait_(piece_wait),
        mailbox_(grants) {}

  // The checks of a PeerPush that need no buffer: INVALID_ARGUMENT naming the value.
  static absl::Status Check(const tensorgrid::v1::PeerPush& cmd);
  // Runs a PeerPush whose pieces' source buffers are `sources` (one per piece, their ranges
  // checked by the caller).
  absl::Status Send(const tensorgrid::v1::PeerPush& cmd,
                    absl::Span<const std::shared_ptr<SessionBuffer>> sources);
  // A peer's PeerDeliver: NOT_FOUND for a grant this server did not make (nothing is filed).
  // Each piece is charged to the session that made its grant (MailboxAccount): one that would
  // pass that session's cap is RESOURCE_EXHAUSTED naming the numbers, and nothing of the
  // delivery is kept. A grant's pieces go, uncharged, when it is revoked.
  absl::Status Receive(const tensorgrid::v1::PeerDeliverRequest& request);
  // Runs an AwaitPush into `dst`, whose grant in the waiting session is `grant`.
  //
  // A grant whose piece was lost (an await that found none within kPieceWait or saw the
  // source go; a push that could not reach the destination) fails every later await and push
  // of it at once with that error: a client that queued many steps ahead learns of it after
  // one wait, not one per step. A new session has new grants.
  absl::Status Await(const tensorgrid::v1::AwaitPush& cmd, const std::string& grant,
                     SessionBuffer& dst);

  size_t held_bytes() const { return mailbox_.held_bytes(); }

 private:
  // Await's wait for the piece and its write into dst.
  absl::Status AwaitPiece(const tensorgrid::v1::AwaitPush& cmd, const std::string& grant,
                          SessionBuffer& dst);
  // The lost-grant bookkeeping (see Await): OK, or the error that lost a piece of `grant`.
  absl::Status LostStatus(const std::string& grant) ABSL_LOCKS_EXCLUDED(lost_mu_);
  void RecordLost(const std::string& grant, const absl::Status& status)
      ABSL_LOCKS_EXCLUDED(lost_mu_);

  PeerClient* const peers_;
  GrantTable* const grants_;
  Metrics* const metrics_;
  const absl::Duration piece_wait_;
  ReduceMailbox mailbox_;  // keyed by (grant, tag); the other key fields stay 0.
  // Grants whose piece was lost, and why; bounded (cleared when full: a grant dropped from
  // it costs one more wait).
  static constexpr size_t kMaxLostGrants = 1024;
  absl::Mutex lost_mu_;
  absl::flat_hash_map<std::string, absl::Status> lost_ ABSL_GUARDED_BY(lost_mu_);
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_PEER_PUSHES_H_
