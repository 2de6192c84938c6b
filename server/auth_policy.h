// AuthPolicy: who may call each method of the tensorgrid.v1 TensorGrid service, as one table
// (kMethodCallers), and the one check every handler runs before anything else (Check). A
// method the table lacks is refused to everyone: a new method stays closed until its line
// says who may call it (auth_policy_test checks that every method of the service descriptor
// has a line; service_test calls every method without credentials and expects a refusal).
//   kClient: a client of this server: the bearer token (--auth-token-file) when the server has
//     one, anyone where it has none (a server on a trusted network, docs/security.md).
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

#include "absl/strings/string_view.h"
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
};

// The line of `method`, or null when the table has none.
const MethodAuth* FindMethodAuth(absl::string_view method);

// The client's address as people write it: "ipv4:127.0.0.1:5432" becomes 127.0.0.1:5432,
// "ipv6:%5B::1%5D:5432" becomes [::1]:5432.
std::string PeerAddress(const grpc::ServerContextBase& context);

class AuthPolicy {
 public:
  // `token`: the bearer token clients and peers send (empty: none required); `peers`: the
  // addresses peer calls are taken from (--peers).
  AuthPolicy(std::string token, PeerAllowList peers)
      : token_(std::move(token)), peers_(std::move(peers)) {}

  // OK when the caller of `method` is one kMethodCallers lets call it. Otherwise
  // UNAUTHENTICATED (no or malformed credentials) or PERMISSION_DENIED (a wrong token, an
  // address --peers does not allow, a method not in the table), naming the method and the
  // fix; every refusal is logged with the caller's address.
  grpc::Status Check(const grpc::ServerContextBase& context, absl::string_view method) const;

 private:
  grpc::Status CheckClient(const grpc::ServerContextBase& context) const;
  grpc::Status CheckPeer(const grpc::ServerContextBase& context, absl::string_view label) const;

  const std::string token_;
  const PeerAllowList peers_;
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_AUTH_POLICY_H_
