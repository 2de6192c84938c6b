// PeerClient: rpc-server's side of server-to-server copies (PeerPull): checks the endpoint
// against the allow-list (--peers) before anything is sent, opens and caches one gRPC channel
// per peer, and streams a granted range from the peer's PeerCopy into a local buffer.
// Plaintext unless a CA bundle (--peer-tls-ca) is given; with --peer-tls-cert/--peer-tls-key
// it presents a client certificate to peers that require mutual TLS. Every peer call carries
// this server's own bearer token (--auth-token-file; the servers of a cluster share one),
// which peers with a token require of peer calls. Thread-safe.
#ifndef TENSORGRID_SERVER_PEER_CLIENT_H_
#define TENSORGRID_SERVER_PEER_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/grpc_channel.h"
#include "server/peer_allow_list.h"
#include "server/session_buffer.h"

namespace grpc {
class Channel;
class ClientContext;
class Status;
}  // namespace grpc

namespace tg::server {

struct PeerClientOptions {
  PeerAllowList allowed = PeerAllowList::Default();
  // ca_pem empty: plaintext; cert_pem/key_pem: this server's client certificate (mTLS).
  // target_name is set per peer.
  rpc::ChannelTls tls;
  // This server's bearer token, sent on every peer call; empty: none.
  std::string auth_token;
};

class PeerClient {
 public:
  explicit PeerClient(PeerClientOptions options) : options_(std::move(options)) {}

  // Reads [src_offset, +size) of the buffer behind `grant` on `endpoint` into
  // [dst_offset, +size) of dst. The destination range is checked before anything is
  // requested and every chunk is checked against it; a short or long stream is an error.
  // PERMISSION_DENIED when the endpoint is not an allowed peer (no connection is made);
  // UNAVAILABLE "peer unreachable: ENDPOINT" when it cannot be reached or does not speak the
  // protocol (the transport's details go to the server's log, not to the client).
  // `after` (0: none) is the source session's command the bytes must wait for there.
  absl::Status Pull(const std::string& endpoint, const std::string& grant, uint64_t src_offset,
                    uint64_t size, SessionBuffer& dst, uint64_t dst_offset, uint64_t after = 0)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The cached channel to `endpoint` (PERMISSION_DENIED, and no connection made, when it is
  // not an allowed peer). For the other peer calls (the all-reduce among servers).
  absl::StatusOr<std::shared_ptr<grpc::Channel>> ChannelFor(const std::string& endpoint)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A finished peer call's status as a client may see it: a transport failure becomes
  // UNAVAILABLE "peer unreachable: ENDPOINT" (the details go to the log) and reports
  // `endpoint` lost (core/lost_endpoint.h); another error keeps its code and says
  // "CALL from ENDPOINT: ...", and reports lost the server the peer said it lost, if any
  // (its error details, IdentityDetails).
  static absl::Status PeerStatus(const std::string& endpoint, const grpc::Status& status,
                                 absl::string_view call);
  // The gRPC error details (a serialized tensorgrid.v1.ErrorDetails) that carry the server
  // `status` reports lost to the server that called; empty when it reports none.
  static std::string IdentityDetails(const absl::Status& status);
  // UNAVAILABLE "peer unreachable: ENDPOINT", marked as reporting `endpoint` lost
  // (core/lost_endpoint.h): what every peer call says of a peer it could not reach.
  static absl::Status Unreachable(absl::string_view endpoint);
  // For waits on a peer (a piece it should send): UNAVAILABLE "peer unreachable: ENDPOINT"
  // once its channel has been seen failed by kFailedPolls calls with no ready look between
  // them, counted in *failures (one failed look may be a connection being re-established;
  // a channel dialing again, or idle, says nothing either way).
  absl::Status CheckAlive(const std::string& endpoint, int* failures) ABSL_LOCKS_EXCLUDED(mu_);
  static constexpr int kFailedPolls = 2;

  // Where and how to open a peer link (server/peer_links.h) to `endpoint`: its address's
  // host, the port its PeerLink call names and the ticket. FAILED_PRECONDITION when this
  // server's peer calls use TLS (a link is plaintext) or the peer offers none; the peer's
  // error (UNIMPLEMENTED from a server before protocol minor 11) otherwise.
  struct LinkOffer {
    std::string host;
    int port = 0;
    std::string ticket;
  };
  absl::StatusOr<LinkOffer> OfferLink(const std::string& endpoint) ABSL_LOCKS_EXCLUDED(mu_);

  // Adds `token` (unless empty) to a peer call as its bearer token.
  static void Authorize(const std::string& token, grpc::ClientContext* context);
  const std::string& auth_token() const { return options_.auth_token; }

 private:
  struct Peer {
    std::string address;  // PeerTarget::address the channel dials.
    std::shared_ptr<grpc::Channel> channel;
    absl::Time checked;
  };
  const PeerClientOptions options_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Peer> peers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_PEER_CLIENT_H_
