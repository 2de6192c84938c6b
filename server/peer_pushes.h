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
// reached through PeerClient (--peers, the peer TLS options). Thread-safe.
#ifndef TENSORGRID_SERVER_PEER_PUSHES_H_
#define TENSORGRID_SERVER_PEER_PUSHES_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
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

  // `grants` must outlive this; `peers` (null: Send is UNIMPLEMENTED and Await does not
  // watch the source) and `metrics` may be null. `piece_wait` replaces kPieceWait (the
  // fuzzer, which has no peer to wait for).
  PeerPushes(PeerClient* peers, GrantTable* grants, Metrics* metrics,
             absl::Duration piece_wait = kPieceWait)
      : peers_(peers), grants_(grants), metrics_(metrics), piece_wait_(piece_wait) {}

  // The checks of a PeerPush that need no buffer: INVALID_ARGUMENT naming the value.
  static absl::Status Check(const tensorgrid::v1::PeerPush& cmd);
  // Runs a PeerPush whose pieces' source buffers are `sources` (one per piece, their ranges
  // checked by the caller).
  absl::Status Send(const tensorgrid::v1::PeerPush& cmd,
                    absl::Span<const std::shared_ptr<SessionBuffer>> sources);
  // A peer's PeerDeliver: NOT_FOUND for a grant this server did not make (nothing is filed).
  absl::Status Receive(const tensorgrid::v1::PeerDeliverRequest& request);
  // Runs an AwaitPush into `dst`, whose grant in the waiting session is `grant`.
  absl::Status Await(const tensorgrid::v1::AwaitPush& cmd, const std::string& grant,
                     SessionBuffer& dst);

  size_t held_bytes() const { return mailbox_.held_bytes(); }

 private:
  PeerClient* const peers_;
  GrantTable* const grants_;
  Metrics* const metrics_;
  const absl::Duration piece_wait_;
  ReduceMailbox mailbox_;  // keyed by (grant, tag); the other key fields stay 0.
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_PEER_PUSHES_H_
