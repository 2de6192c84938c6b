// CollectiveRunner: rpc-server's side of the all-reduce among servers (tensorgrid.proto's
// AllReduce and PeerReduce). AllReduce, one command per device taking part: the first of a
// collective's commands to arrive runs this server's whole part (its devices' tensors summed
// here, through the device family's Collectives when they share one, else on the host; then
// the exchange with the other servers, a ring, a butterfly or direct (the client's pick for
// small tensors on three servers or more; server/allreduce_schedule.h) whose pieces go over one
// PeerReduceStream per session and peer; then the sum written to every device's tensor),
// and the others wait for that part to be done, so that the part runs once whether the
// session runs its devices' commands one after the other or each on its own thread. Receive
// files a peer's piece in the mailbox, for grants of this server only (the grant the
// receiving session made is the capability).
//
// A piece of at most kMaxLinkPieceBytes (a decode step's) goes over a peer link instead
// (server/peer_links.h: a TCP connection per session, peer and grant that the command threads
// write and read themselves) when both servers offer links; a peer that offers none, or a
// link that cannot be opened, keeps the stream (tried again after kLinkRetry), and a piece
// whose link broke goes on the stream.
//
// Peers are reached through PeerClient: --peers (PERMISSION_DENIED before any connection,
// every endpoint checked before anything is sent) and the peer TLS options apply. A peer
// that dies mid-collective is noticed within about a second (its channel fails), and the
// command fails with "peer unreachable: ENDPOINT"; a peer that is alive but silent fails it
// after kPieceWait.
//
// The pieces a session sends carry its sender key (PeerPushes::SenderKey, the same key as
// its pushes), and each piece is filed with the key it came with: when the sending session
// ends, its end notice (PeerPushes::SenderEnded) drops from this mailbox what it sent that
// nobody took, and refuses what of it is still on its way. Thread-safe.
#ifndef TENSORGRID_SERVER_COLLECTIVE_RUNNER_H_
#define TENSORGRID_SERVER_COLLECTIVE_RUNNER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/backend.h"
#include "server/allreduce_schedule.h"
#include "server/peer_links.h"
#include "server/peer_reduce_stream.h"
#include "server/reduce_mailbox.h"
#include "server/session_buffer.h"
#include "tensorgrid/v1/tensorgrid.pb.h"

namespace tg::server {

class GrantTable;
class Metrics;
class PeerClient;
class PeerPushes;

using BufferFinder =
    absl::FunctionRef<absl::StatusOr<std::shared_ptr<SessionBuffer>>(uint64_t handle)>;

class CollectiveRunner {
 public:
  // Servers in one collective at most, and devices of one server in it.
  static constexpr int kMaxServers = 64;
  static constexpr int kMaxLocalDevices = 64;
  // Largest tensor summed (bytes): four times the largest activation of a 512-token batch
  // of a 16k-wide model, with room.
  static constexpr uint64_t kMaxBytes = uint64_t{256} << 20;
  // AUTO: ring at or above this many bytes, butterfly below (as meta's AllReducer: below,
  // the ring's 2(m-1) round trips cost more than the butterfly's extra bytes); with two
  // servers always the butterfly (the same bytes in one step) unless BF16 is asked for.
  static constexpr uint64_t kRingMinBytes = uint64_t{64} << 10;
  // How long a piece from a peer is waited for: the peer may still be computing what comes
  // before its part (a long prompt on a slow device).
  static constexpr absl::Duration kPieceWait = absl::Seconds(60);
  // How often a wait looks at the peer's channel (the first time after
  // ReduceMailbox::kFirstCheck, so that the collectives queued behind one that lost a peer
  // fail at once).
  static constexpr absl::Duration kPeerPoll = absl::Milliseconds(200);
  // A peer that offered no link (or whose link could not be opened) is asked again after
  // this long; a wait for a small piece looks for a newly opened link this often.
  static constexpr absl::Duration kLinkRetry = absl::Seconds(60);
  static constexpr absl::Duration kLinkLook = absl::Milliseconds(10);
  // Outgoing links held at most (a session holds one per peer and grant).
  static constexpr size_t kMaxOutLinks = 4096;

  // `peers`, `grants` must outlive the runner; `metrics` may be null. `senders` (may be null:
  // pieces go without a sender key) draws the sessions' sender keys; it must outlive the
  // runner, and is used by Run only, so it may be constructed after the runner. `links` (may
  // be null: no links) takes this server's links and must outlive the runner; pieces go over
  // links only while it listens (PeerLinks::port).
  CollectiveRunner(PeerClient* peers, GrantTable* grants, Metrics* metrics,
                   PeerPushes* senders = nullptr, PeerLinks* links = nullptr)
      : peers_(peers),
        grants_(grants),
        metrics_(metrics),
        senders_(senders),
        links_(links),
        mailbox_(grants) {}

  // The AllReduce command of session `session_id`, whose buffers `find` resolves. While it
  // waits for its peers' pieces it asks `cancelled` (may be empty) every kPeerPoll, and gives
  // up with CANCELLED once its session ended: a close never waits out kPieceWait.
  absl::Status Run(const std::string& session_id, BufferFinder find,
                   const tensorgrid::v1::AllReduce& cmd,
                   const std::function<bool()>& cancelled = {}) ABSL_LOCKS_EXCLUDED(mu_);
  // A peer's piece (PeerReduceStream, or PeerReduce from servers before it): NOT_FOUND for
  // a grant this server did not make. `sender` (may be empty: not known) is the sending
  // session's key (PeerPushes::SenderIn(context, PeerPushes::kSenderKey)); FAILED_PRECONDITION
  // for a sender that ended.
  absl::Status Receive(const tensorgrid::v1::PeerReduceRequest& request, std::string sender = {});
  // The session is gone: its streams and links to peers are closed.
  void EndSession(const std::string& session_id) ABSL_LOCKS_EXCLUDED(streams_mu_);
  // Pieces this server sent over links (tests check that links carried them).
  uint64_t link_pieces_sent() const { return link_pieces_sent_.load(); }

  size_t held_bytes() const { return mailbox_.held_bytes(); }
  // Where peers' pieces wait: PeerPushes drops an ended sender's pieces from it.
  ReduceMailbox* mailbox() { return &mailbox_; }

 private:
  // This server's part of one collective, shared by its devices' commands.
  struct Part {
    int commands_left = 0;
    bool done = false;
    absl::Status status;
  };
  struct Local {
    std::vector<std::shared_ptr<SessionBuffer>> buffers;
    std::vector<uint64_t> offsets;
  };

  using PeerStreams = std::vector<std::shared_ptr<PeerReduceStream>>;
  using PeerLinksOut = std::vector<std::shared_ptr<OutLink>>;

  absl::Status RunPart(const std::string& session_id, BufferFinder find,
                       const tensorgrid::v1::AllReduce& cmd, const std::function<bool()>& cancelled);
  absl::StatusOr<Local> Resolve(BufferFinder find, const tensorgrid::v1::AllReduce& cmd) const;
  // Sums the local tensors into `sum`.
  absl::Status LocalSum(const Local& local, size_t count, std::vector<float>* sum)
      ABSL_LOCKS_EXCLUDED(comm_mu_);
  absl::Status Exchange(const std::string& session_id, const tensorgrid::v1::AllReduce& cmd,
                        const std::function<bool()>& cancelled, std::vector<float>* sum);
  // The session's stream to `endpoint`, opened on first use and again after it ended.
  absl::StatusOr<std::shared_ptr<PeerReduceStream>> StreamFor(const std::string& session_id,
                                                              const std::string& endpoint)
      ABSL_LOCKS_EXCLUDED(streams_mu_);
  // Whether pieces may go over links: this server takes links (so its peers offer theirs).
  bool LinksOn() const { return links_ != nullptr && links_->port() != 0; }
  // The session's link to `endpoint` for pieces under `grant`, opened on first use (and
  // again after it broke); null when the peer offers none or it cannot be opened.
  std::shared_ptr<OutLink> LinkFor(const std::string& session_id, const std::string& endpoint,
                                   const std::string& grant, const std::string& from)
      ABSL_LOCKS_EXCLUDED(streams_mu_);
  // Queues the step's pieces on the stream without waiting for them, or writes the piece
  // into `link` (may be null) when it fits one.
  absl::Status Push(const tensorgrid::v1::AllReduce& cmd, const ExchangeStep& step, bool bf16,
                    const std::vector<float>& sum, PeerReduceStream& stream, OutLink* link);
  // Waits for one small piece that may come over a link from `from`, or the mailbox.
  absl::StatusOr<std::string> TakeLinkable(const PieceKey& key, const std::string& from,
                                           absl::Time deadline,
                                           absl::FunctionRef<absl::Status()> check);
  // Takes the step's pieces from the mailbox; `streams` and `links` (this exchange's, by
  // rank) are watched for a piece of ours that could not be delivered.
  absl::Status Pull(const tensorgrid::v1::AllReduce& cmd, const ExchangeStep& step, bool bf16,
                    absl::Time deadline, const PeerStreams& streams, const PeerLinksOut& links,
                    const std::function<bool()>& cancelled, std::vector<float>* sum);

  PeerClient* const peers_;
  GrantTable* const grants_;
  Metrics* const metrics_;
  PeerPushes* const senders_;
  PeerLinks* const links_;
  ReduceMailbox mailbox_;
  std::atomic<uint64_t> link_pieces_sent_{0};
  absl::Mutex mu_;
  absl::flat_hash_map<std::pair<std::string, uint64_t>, std::shared_ptr<Part>> parts_
      ABSL_GUARDED_BY(mu_);
  // Local Collectives, per set of devices (their setup can be costly: NCCL); a communicator
  // is used by one thread at a time.
  absl::Mutex comm_mu_;
  absl::flat_hash_map<std::vector<Device*>, std::unique_ptr<Communicator>> communicators_
      ABSL_GUARDED_BY(comm_mu_);
  // The pieces a session sends to a peer go over one stream, per (session id, endpoint):
  // a piece the peer refuses ends only that session's stream.
  absl::Mutex streams_mu_;
  absl::flat_hash_map<std::pair<std::string, std::string>, std::shared_ptr<PeerReduceStream>>
      streams_ ABSL_GUARDED_BY(streams_mu_);
  // Links per (session id, endpoint, grant), and when a peer that offered none is asked again.
  absl::flat_hash_map<std::tuple<std::string, std::string, std::string>, std::shared_ptr<OutLink>>
      out_links_ ABSL_GUARDED_BY(streams_mu_);
  absl::flat_hash_map<std::string, absl::Time> no_link_until_ ABSL_GUARDED_BY(streams_mu_);
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_COLLECTIVE_RUNNER_H_
