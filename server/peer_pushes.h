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
//
// A piece nobody awaits (its sending session ended before the destination's AwaitPush, which
// will then never come) must not stay charged to the destination session: each sending
// session carries a random sender key in its deliveries (metadata kSenderKey), and when it
// ends SenderEnded tells every server it delivered to (an empty PeerDeliver with
// kSenderEndedKey), which drops that sender's pieces still in its mailbox. The all-reduce
// pieces a session sends (CollectiveRunner, over PeerReduceStream) carry the same key, drawn
// here too, so that one notice per destination drops both kinds: the receiving side drops
// them from this mailbox and from the all-reduce one (`reduce_mailbox`). The key is drawn
// here, never the session id, so a peer that learns it learns nothing else; only a caller
// that passed the peer checks (token or peer identity, --peers) is heard. Thread-safe.
#ifndef TENSORGRID_SERVER_PEER_PUSHES_H_
#define TENSORGRID_SERVER_PEER_PUSHES_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/protocol.h"
#include "server/reduce_mailbox.h"
#include "server/session_buffer.h"
#include "tensorgrid/v1/tensorgrid.pb.h"

namespace grpc {
class ServerContext;
class ServerContextBase;
}  // namespace grpc

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
  // gRPC metadata of a PeerDeliver, PeerReduce or PeerReduceStream: the sending session's
  // key; and (on an empty PeerDeliver) the key of a sending session that ended.
  static constexpr char kSenderKey[] = "tg-push-sender";
  static constexpr char kSenderEndedKey[] = "tg-push-sender-ended";
  // How long SenderEnded waits for each destination (the session's close waits for it): a
  // destination that does not answer by then keeps the pieces until its own sweep
  // (ReduceMailbox::kStaleAfter) or its session's end.
  static constexpr absl::Duration kSenderEndedDeadline = absl::Seconds(1);
  // Destinations of one sending session remembered at most (more is not a split a client
  // makes; pieces to the others wait for the destination's own sweep).
  static constexpr size_t kMaxDestinations = 64;

  // `grants` must outlive this; `peers` (null: Send is UNIMPLEMENTED and Await does not
  // watch the source) and `metrics` may be null. `piece_wait` replaces kPieceWait (the
  // fuzzer, which has no peer to wait for). `reduce_mailbox` (may be null; else it must
  // outlive this) is the all-reduce's mailbox (CollectiveRunner::mailbox), which a sender's
  // end notice empties of that sender's pieces too.
  PeerPushes(PeerClient* peers, GrantTable* grants, Metrics* metrics,
             absl::Duration piece_wait = kPieceWait, ReduceMailbox* reduce_mailbox = nullptr)
      : peers_(peers),
        grants_(grants),
        metrics_(metrics),
        piece_wait_(piece_wait),
        reduce_mailbox_(reduce_mailbox),
        mailbox_(grants) {}

  // The checks of a PeerPush that need no buffer: INVALID_ARGUMENT naming the value.
  static absl::Status Check(const tensorgrid::v1::PeerPush& cmd);
  // Runs a PeerPush whose pieces' source buffers are `sources` (one per piece, their ranges
  // checked by the caller), for session `session` (empty: pieces not tracked by sender).
  absl::Status Send(const tensorgrid::v1::PeerPush& cmd,
                    absl::Span<const std::shared_ptr<SessionBuffer>> sources,
                    const std::string& session = {}) ABSL_LOCKS_EXCLUDED(senders_mu_);
  // The key session `session`'s pieces to `endpoint` carry (as kSenderKey), drawn on its
  // first use; `endpoint` is remembered as a destination for SenderEnded. For Send and for
  // the all-reduce's streams (CollectiveRunner).
  std::string SenderKey(const std::string& session, const std::string& endpoint)
      ABSL_LOCKS_EXCLUDED(senders_mu_);
  // Session `session` ended (after its last Send returned and its last all-reduce ran):
  // every server it sent pieces to drops what it sent that nobody took, pushes and
  // all-reduce pieces alike, and refuses its pieces still on their way. Waits up to
  // kSenderEndedDeadline per server.
  void SenderEnded(const std::string& session) ABSL_LOCKS_EXCLUDED(senders_mu_);
  // The sender key `key` (kSenderKey or kSenderEndedKey) in a peer call's metadata; empty
  // when absent or longer than a key of ours (a key is 32 hex digits, see SenderKey).
  static std::string SenderIn(const grpc::ServerContextBase& context, const char* key);
  // A peer's PeerDeliver: NOT_FOUND for a grant this server did not make (nothing is filed).
  // Each piece is charged to the session that made its grant (MailboxAccount): one that would
  // pass that session's cap is RESOURCE_EXHAUSTED naming the numbers, and nothing of the
  // delivery is kept. A grant's pieces go, uncharged, when it is revoked.
  // `sender` (may be empty) is the sending session's key: its pieces go when it ends.
  absl::Status Receive(const tensorgrid::v1::PeerDeliverRequest& request, std::string sender = {});
  // A PeerDeliver call (its caller checked as a peer): a sender's end notice (kSenderEndedKey
  // on an empty delivery) drops that sender's pieces; else Receive with kSenderKey's sender.
  absl::Status Receive(const grpc::ServerContext& context,
                       const tensorgrid::v1::PeerDeliverRequest& request);
  // Drops the pieces the sender with this key sent that nobody took, from this mailbox and
  // the all-reduce's, and refuses its later ones there; the bytes dropped.
  size_t DropSender(absl::string_view sender);
  // Runs an AwaitPush into `dst`, whose grant in the waiting session is `grant`.
  //
  // A grant whose piece was lost (an await that found none within kPieceWait or saw the
  // source go; a push that could not reach the destination) fails every later await and push
  // of it at once with that error: a client that queued many steps ahead learns of it after
  // one wait, not one per step. A new session has new grants.
  // `cancelled` (may be empty) is asked every kPeerPoll: once the session ended the wait gives
  // up with CANCELLED, so a close never waits out the piece wait.
  absl::Status Await(const tensorgrid::v1::AwaitPush& cmd, const std::string& grant,
                     SessionBuffer& dst, const std::function<bool()>& cancelled = {});

  size_t held_bytes() const { return mailbox_.held_bytes(); }

 private:
  // Await's wait for the piece and its write into dst.
  absl::Status AwaitPiece(const tensorgrid::v1::AwaitPush& cmd, const std::string& grant,
                          SessionBuffer& dst, const std::function<bool()>& cancelled);
  // The lost-grant bookkeeping (see Await): OK, or the error that lost a piece of `grant`.
  absl::Status LostStatus(const std::string& grant) ABSL_LOCKS_EXCLUDED(lost_mu_);
  void RecordLost(const std::string& grant, const absl::Status& status)
      ABSL_LOCKS_EXCLUDED(lost_mu_);

  PeerClient* const peers_;
  GrantTable* const grants_;
  Metrics* const metrics_;
  const absl::Duration piece_wait_;
  ReduceMailbox* const reduce_mailbox_;  // the all-reduce's; may be null.
  ReduceMailbox mailbox_;                // keyed by (grant, tag); the other key fields stay 0.

  // Per sending session of this server: its key and the servers it sent pieces to. An entry
  // goes with SenderEnded, so there are as many as sessions that pushed or all-reduced.
  struct Sender {
    std::string key;
    absl::flat_hash_set<std::string> destinations;
  };
  absl::Mutex senders_mu_;
  absl::flat_hash_map<std::string, Sender> senders_ ABSL_GUARDED_BY(senders_mu_);
  // Grants whose piece was lost, and why; bounded (cleared when full: a grant dropped from
  // it costs one more wait).
  static constexpr size_t kMaxLostGrants = 1024;
  absl::Mutex lost_mu_;
  absl::flat_hash_map<std::string, absl::Status> lost_ ABSL_GUARDED_BY(lost_mu_);
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_PEER_PUSHES_H_
