// AuthPolicy: who may call each method of the tensorgrid.v1 TensorGrid service, as one table
// (kMethodCallers), and the one check every handler runs before anything else (Check). A
// method the table lacks is refused to everyone: a new method stays closed until its line
// says who may call it (auth_policy_test checks that every method of the service descriptor
// has a line; service_test calls every method without credentials and expects a refusal).
//   kClient: a client of this server: the bearer token (--auth-token-file) or a client's own
//     token (--client-tokens, which also names the client: ClientOf) when the server has
//     either, anyone where it has neither (a server on a trusted network, docs/security.md).
//   kPeer: another server of the cluster: its token, or a client certificate the transport
//     verified against --tls-client-ca (--peer-tls-cert), always from an address --peers
//     allows (loopback by default).
//   kAnyone: no credentials (no method of the service today; gRPC's health service, a
//     separate service, is open).
// Thread-safety: immutable after construction; Check may be called from any thread.
#ifndef TENSORGRID_SERVER_AUTH_POLICY_H_
#define TENSORGRID_SERVER_AUTH_POLICY_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/content_hash.h"
#include "server/peer_allow_list.h"

namespace tg::server {

enum class Caller { kAnyone, kClient, kPeer };

struct MethodAuth {
  absl::string_view method;  // the method's name in the proto ("Hello").
  Caller caller;
  // What refusals and logs call it (the words the method's own errors use).
  absl::string_view label;
};

// The policy, one line per method of tensorgrid.v1.TensorGrid.
inline constexpr MethodAuth kMethodCallers[] = {
    {"Hello", Caller::kClient, "hello"},
    {"Session", Caller::kClient, "session"},
    {"Upload", Caller::kClient, "upload"},
    {"Download", Caller::kClient, "download"},
    {"FillPieces", Caller::kClient, "fill"},
    {"PeerCopy", Caller::kPeer, "peer copy"},
    {"PeerReduce", Caller::kPeer, "peer_reduce"},
    {"PeerReduceStream", Caller::kPeer, "peer_reduce"},
    {"PeerDeliver", Caller::kPeer, "peer_deliver"},
    {"PeerLink", Caller::kPeer, "peer_link"},
};

// The line of `method`, or null when the table has none.
const MethodAuth* FindMethodAuth(absl::string_view method);

// The client's address as people write it: "ipv4:127.0.0.1:5432" becomes 127.0.0.1:5432,
// "ipv6:%5B::1%5D:5432" becomes [::1]:5432.
std::string PeerAddress(const grpc::ServerContextBase& context);

// A client's own token (--client-tokens): the client that sends it is known by `name`, and its
// sessions share that client's quotas (server/client_accounts.h).
struct ClientToken {
  std::string name;
  std::string token;
};

// The lines of a --client-tokens file: `NAME TOKEN` each, blank lines and `#` comments
// skipped. A name starts with a letter and holds letters, digits, '_', '-', '.'; a token is
// 16 characters or more. INVALID_ARGUMENT naming `file`, the line and what is wrong for
// anything else, a repeated name or token, or a token equal to `cluster_token`.
absl::StatusOr<std::vector<ClientToken>> ParseClientTokens(absl::string_view text,
                                                           absl::string_view file,
                                                           absl::string_view cluster_token);

// The host part of an address as PeerAddress writes it: 127.0.0.1:5432 becomes 127.0.0.1,
// [::1]:5432 becomes [::1]; one without a port is returned whole.
std::string AddressHost(absl::string_view address);

class AuthPolicy {
 public:
  // `token`: the bearer token clients and peers send (empty: none required); `peers`: the
  // addresses peer calls are taken from (--peers); `clients`: clients' own tokens, which
  // client calls (never peer calls) accept too.
  AuthPolicy(std::string token, PeerAllowList peers, std::vector<ClientToken> clients = {});

  // OK when the caller of `method` is one kMethodCallers lets call it. Otherwise
  // UNAUTHENTICATED (no or malformed credentials) or PERMISSION_DENIED (a wrong token, an
  // address --peers does not allow, a method not in the table), naming the method and the
  // fix; every refusal is logged with the caller's address.
  grpc::Status Check(const grpc::ServerContextBase& context, absl::string_view method) const;

  // Who a client is, for its quotas: the name of the client token it sent, else the host part
  // of its address (so that without client tokens every host is a client of its own).
  std::string ClientOf(const grpc::ServerContextBase& context) const;

 private:
  grpc::Status CheckClient(const grpc::ServerContextBase& context) const;
  grpc::Status CheckPeer(const grpc::ServerContextBase& context, absl::string_view label) const;
  // The index into clients_ of the client token the call carries; -1 for none.
  int MatchClientToken(const grpc::ServerContextBase& context) const;

  const std::string token_;
  const PeerAllowList peers_;
  const std::vector<ClientToken> clients_;
  std::vector<rpc::Sha256Digest> client_digests_;  // clients_' tokens, hashed once.
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_AUTH_POLICY_H_
