// PeerLinks: rpc-server's peer links (their bytes: server/link_wire.h). Over gRPC an
// all-reduce piece between servers (PeerReduceStream) is a write handed to gRPC's threads on
// the sender and, on the receiver, an HTTP/2 read on one of gRPC's threads that files the
// piece and wakes the command thread waiting for it: at a decode step's size those hand-offs,
// not the bytes, were most of a step's all-reduce. A link is a TCP connection of its own from
// one sending session to this server, for one grant of this server and one sender endpoint:
// the sender's command thread writes a piece into it (OutLink::Send) and the receiving
// session's command thread reads it (Take), so a piece costs one kernel wake-up at most (none
// when it comes within the reader's first kSpinBeforeSleep).
//
// Links are plaintext, so they are offered only by a server without TLS (RpcServer listens
// for them only then, and --peer-link-port off turns them off) and used only by a server
// whose peer calls are plaintext; anything else keeps the gRPC stream. Who may open one: a
// peer that passed this server's peer checks on a PeerLink call (token, --peers) gets a
// ticket (IssueTicket), good once and for kTicketLife; the connection must then come from an
// address --peers allows, present the ticket, and name a grant this server made. A link dies
// with its grant (revoked: the buffer freed or the session ended), when its sender closes
// it, or on a malformed piece; a piece a link brings for another collective than the one
// being read is filed in the all-reduce mailbox, charged to the grant's session as any piece.
// Thread-safe.
#ifndef TENSORGRID_SERVER_PEER_LINKS_H_
#define TENSORGRID_SERVER_PEER_LINKS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/grant_table.h"
#include "server/link_wire.h"
#include "server/peer_allow_list.h"
#include "server/reduce_mailbox.h"

namespace tg::server {

class Metrics;

// The sending end of one link; the destructor closes it. Thread-safe.
class OutLink {
 public:
  // Connects to `host` (an address, "[v6]" or not) at `port` within `timeout` and says
  // `hello`; UNAVAILABLE when the connection fails, FAILED_PRECONDITION with the peer's reason
  // when it refuses the link.
  static absl::StatusOr<std::unique_ptr<OutLink>> Dial(const std::string& host, int port,
                                                       const LinkHello& hello,
                                                       absl::Duration timeout);
  ~OutLink();
  OutLink(const OutLink&) = delete;
  OutLink& operator=(const OutLink&) = delete;

  // Writes one piece (at most kMaxLinkPieceBytes); after an error every later Send fails.
  absl::Status Send(const LinkPieceHeader& header, absl::string_view data) ABSL_LOCKS_EXCLUDED(mu_);
  bool broken() const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether the peer closed the link (it never writes on it after its answer): it dropped the
  // link, and may have dropped a piece already sent (its grant revoked, a piece refused).
  bool ClosedByPeer() const;

 private:
  explicit OutLink(int fd) : fd_(fd) {}
  const int fd_;
  mutable absl::Mutex mu_;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
};

class PeerLinks final : public RevokeListener {
 public:
  // How long a ticket may wait for its link, and tickets held at most.
  static constexpr absl::Duration kTicketLife = absl::Seconds(30);
  static constexpr size_t kMaxTickets = 1024;
  // Links held at most, in all.
  static constexpr size_t kMaxLinks = 4096;
  // How long a connection may take to say its hello, and a started piece to arrive whole
  // (a peer that stalls mid-piece loses its link).
  static constexpr absl::Duration kHelloWait = absl::Seconds(2);
  static constexpr absl::Duration kPieceWait = absl::Seconds(10);
  // How long Take polls a link without sleeping before it blocks: a reader asleep costs its
  // sender the wake-up (a piece of 8 KiB on a 2-vCPU VM's loopback: 23-35 us to send to a
  // sleeping reader, 15-18 to a polling one). The reader's command thread has nothing else
  // to do meanwhile; it yields between polls, so that where servers outnumber cores the one
  // still computing what it waits for runs (three one-thread servers on 2 vCPUs: 1B -sm
  // tensor 17.7-18.9 t/s against 15.4-16.7 without).
  static constexpr absl::Duration kSpinBeforeSleep = absl::Microseconds(200);

  // `grants` and `metrics` (may be null) must outlive this; `allowed` is --peers.
  PeerLinks(GrantTable* grants, PeerAllowList allowed, Metrics* metrics = nullptr);
  ~PeerLinks() override;
  PeerLinks(const PeerLinks&) = delete;
  PeerLinks& operator=(const PeerLinks&) = delete;

  // Listens on `host`:`port` (0: a free port) and takes links on a thread of its own.
  // UNAVAILABLE naming the address when it cannot be bound.
  absl::Status Listen(const std::string& host, int port) ABSL_LOCKS_EXCLUDED(mu_);
  // The port links are taken on; 0 when not listening (yet: Listen may come after the
  // server started serving).
  int port() const { return port_.load(); }
  // A ticket for one link (a PeerLink call, its caller checked as a peer): FAILED_PRECONDITION
  // when this server takes no links, RESOURCE_EXHAUSTED when kMaxTickets are outstanding.
  absl::StatusOr<std::string> IssueTicket() ABSL_LOCKS_EXCLUDED(mu_);

  // Whether pieces from `from` for `grant` come over a link.
  bool Linked(const std::string& grant, const std::string& from) const ABSL_LOCKS_EXCLUDED(mu_);
  // Reads the link from `from` for key.grant for up to `wait`: the piece `key` when it comes,
  // or is in `mailbox` already; nullopt when it does not come in time, or when there is no
  // such link (any more). Pieces of other keys are filed in `mailbox`. Another thread reading
  // the same link meanwhile files what it reads there too.
  std::optional<std::string> Take(const PieceKey& key, const std::string& from, absl::Duration wait,
                                  ReduceMailbox& mailbox) ABSL_LOCKS_EXCLUDED(mu_);

  // RevokeListener: closes the grant's links.
  void Revoked(const std::string& grant) override ABSL_LOCKS_EXCLUDED(mu_);
  size_t links() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct InLink {
    ~InLink();
    int fd = -1;
    std::string sender;   // the sending session's key, for the mailbox.
    std::string peer;     // the caller's address, for the log.
    absl::Mutex read_mu;  // one reader at a time; others wait on the mailbox.
  };
  using LinkKey = std::pair<std::string, std::string>;  // grant, sender endpoint.

  void AcceptLoop();
  // Checks a new connection and its hello; files the link.
  void Admit(int fd, const std::string& peer) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status CheckHello(const LinkHello& hello) ABSL_LOCKS_EXCLUDED(mu_);
  // Reads one piece from `link` (readable): the piece `key`, or nullopt after filing another.
  absl::StatusOr<std::optional<std::string>> ReadPiece(InLink& link, const PieceKey& key,
                                                       ReduceMailbox& mailbox);
  void Drop(const LinkKey& key, const std::shared_ptr<InLink>& link, const absl::Status& why)
      ABSL_LOCKS_EXCLUDED(mu_);

  GrantTable* const grants_;
  const PeerAllowList allowed_;
  Metrics* const metrics_;
  int listen_fd_ = -1;
  int wake_fd_[2] = {-1, -1};  // a pipe: written to stop the accept loop.
  std::atomic<int> port_{0};
  std::thread acceptor_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, absl::Time> tickets_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<LinkKey, std::shared_ptr<InLink>> links_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_PEER_LINKS_H_
