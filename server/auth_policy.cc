#include "server/auth_policy.h"

#include <openssl/crypto.h>

#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "proto/content_hash.h"
#include "proto/protocol.h"
#include "server/log.h"

namespace tg::server {
namespace {

grpc::Status Error(grpc::StatusCode code, std::string message) {
  return grpc::Status(code, std::move(message));
}

// OK when the call carries `authorization: Bearer <expected>`.
grpc::Status CheckBearerToken(const grpc::ServerContextBase& context, const std::string& expected) {
  const auto& md = context.client_metadata();
  auto it = md.find(rpc::kAuthMetadataKey);
  if (it == md.end()) {
    return Error(grpc::StatusCode::UNAUTHENTICATED,
                 "missing bearer token: send metadata 'authorization: Bearer <token>'");
  }
  const absl::string_view value(it->second.data(), it->second.size());
  constexpr absl::string_view kBearer = "Bearer ";
  if (!absl::StartsWith(value, kBearer)) {
    return Error(grpc::StatusCode::UNAUTHENTICATED,
                 "malformed authorization metadata: expected 'Bearer <token>'");
  }
  const absl::string_view token = value.substr(kBearer.size());
  // Compare digests in constant time: neither the length nor a prefix of the token leaks.
  const rpc::Sha256Digest got = rpc::Sha256(token.data(), token.size());
  const rpc::Sha256Digest want = rpc::Sha256(expected.data(), expected.size());
  if (CRYPTO_memcmp(got.data(), want.data(), got.size()) != 0) {
    return Error(grpc::StatusCode::PERMISSION_DENIED, "wrong bearer token");
  }
  return grpc::Status::OK;
}

}  // namespace

const MethodAuth* FindMethodAuth(absl::string_view method) {
  for (const MethodAuth& m : kMethodCallers) {
    if (m.method == method) return &m;
  }
  return nullptr;
}

std::string PeerAddress(const grpc::ServerContextBase& context) {
  const std::string full = context.peer();
  absl::string_view peer = full;
  for (absl::string_view scheme : {"ipv4:", "ipv6:"}) {
    if (absl::ConsumePrefix(&peer, scheme)) break;
  }
  return absl::StrReplaceAll(peer, {{"%5B", "["}, {"%5D", "]"}});
}

grpc::Status AuthPolicy::Check(const grpc::ServerContextBase& context,
                               absl::string_view method) const {
  const MethodAuth* auth = FindMethodAuth(method);
  if (auth == nullptr) {
    const grpc::Status refused =
        Error(grpc::StatusCode::PERMISSION_DENIED,
              absl::StrCat(method,
                           ": no line in the server's auth table (server/auth_policy.h) "
                           "says who may call it"));
    kServerLog.Warn(
        "call refused",
        {{"peer", PeerAddress(context)}, {"call", method}, {"error", refused.error_message()}});
    return refused;
  }
  switch (auth->caller) {
    case Caller::kAnyone:
      return grpc::Status::OK;
    case Caller::kClient:
      return CheckClient(context);
    case Caller::kPeer:
      return CheckPeer(context, auth->label);
  }
  return Error(grpc::StatusCode::INTERNAL, "unknown caller kind");
}

grpc::Status AuthPolicy::CheckClient(const grpc::ServerContextBase& context) const {
  if (token_.empty()) return grpc::Status::OK;
  grpc::Status status = CheckBearerToken(context, token_);
  if (!status.ok()) {
    kServerLog.Warn("call refused",
                    {{"peer", PeerAddress(context)}, {"error", status.error_message()}});
  }
  return status;
}

grpc::Status AuthPolicy::CheckPeer(const grpc::ServerContextBase& context,
                                   absl::string_view label) const {
  grpc::Status status = grpc::Status::OK;
  if (!token_.empty()) {
    status = CheckBearerToken(context, token_);
    // A client certificate the transport verified against --tls-client-ca is a peer's
    // identity too (servers with --peer-tls-cert).
    const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
    if (!status.ok() && auth != nullptr && auth->IsPeerAuthenticated()) status = grpc::Status::OK;
    if (!status.ok()) {
      status = Error(status.error_code(),
                     absl::StrCat(label, ": ", status.error_message(),
                                  " (a peer server sends its own --auth-token-file, which the "
                                  "servers of a cluster share, or a client certificate of this "
                                  "server's --tls-client-ca: --peer-tls-cert)"));
    }
  }
  if (status.ok()) {
    if (absl::Status allowed = peers_.CheckCaller(PeerAddress(context)); !allowed.ok()) {
      status =
          Error(grpc::StatusCode::PERMISSION_DENIED, absl::StrCat(label, ": ", allowed.message()));
    }
  }
  if (!status.ok()) {
    kServerLog.Warn(
        "peer call refused",
        {{"peer", PeerAddress(context)}, {"call", label}, {"error", status.error_message()}});
  }
  return status;
}

}  // namespace tg::server
