#include "server/auth_policy.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "proto/protocol.h"
#include "server/log.h"

namespace tg::server {
namespace {

grpc::Status Error(grpc::StatusCode code, std::string message) {
  return grpc::Status(code, std::move(message));
}

// The token of the call's `authorization: Bearer <token>` metadata; UNAUTHENTICATED naming
// what is missing or malformed otherwise.
absl::StatusOr<absl::string_view> BearerToken(const grpc::ServerContextBase& context) {
  const auto& md = context.client_metadata();
  auto it = md.find(rpc::kAuthMetadataKey);
  if (it == md.end()) {
    return absl::UnauthenticatedError(
        "missing bearer token: send metadata 'authorization: Bearer <token>'");
  }
  const absl::string_view value(it->second.data(), it->second.size());
  constexpr absl::string_view kBearer = "Bearer ";
  if (!absl::StartsWith(value, kBearer)) {
    return absl::UnauthenticatedError(
        "malformed authorization metadata: expected 'Bearer <token>'");
  }
  return value.substr(kBearer.size());
}

// Compares digests in constant time: neither the length nor a prefix of a token leaks.
bool SameDigest(const rpc::Sha256Digest& a, const rpc::Sha256Digest& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

rpc::Sha256Digest Digest(absl::string_view token) {
  return rpc::Sha256(token.data(), token.size());
}

// OK when the call carries `authorization: Bearer <expected>`.
grpc::Status CheckBearerToken(const grpc::ServerContextBase& context, const std::string& expected) {
  absl::StatusOr<absl::string_view> token = BearerToken(context);
  if (!token.ok()) {
    return Error(grpc::StatusCode::UNAUTHENTICATED, std::string(token.status().message()));
  }
  if (!SameDigest(Digest(*token), Digest(expected))) {
    return Error(grpc::StatusCode::PERMISSION_DENIED, "wrong bearer token");
  }
  return grpc::Status::OK;
}

bool ValidClientName(absl::string_view name) {
  if (name.empty() || !absl::ascii_isalpha(name[0])) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '_' && c != '-' && c != '.') return false;
  }
  return true;
}

// A client token shorter than this is refused: it could be guessed.
constexpr size_t kMinClientTokenChars = 16;

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

std::string AddressHost(absl::string_view address) {
  // Only an address with a port ("host:port", "[v6]:port") loses its last part.
  const size_t colon = address.rfind(':');
  const bool has_port =
      colon != absl::string_view::npos && colon > 0 && colon + 1 < address.size() &&
      std::all_of(address.begin() + colon + 1, address.end(),
                  [](char c) { return absl::ascii_isdigit(c); }) &&
      (address[0] == '[' ? address[colon - 1] == ']' : address.find(':') == colon);
  return std::string(has_port ? address.substr(0, colon) : address);
}

absl::StatusOr<std::vector<ClientToken>> ParseClientTokens(absl::string_view text,
                                                           absl::string_view file,
                                                           absl::string_view cluster_token) {
  std::vector<ClientToken> out;
  absl::flat_hash_set<std::string> names;
  absl::flat_hash_set<std::string> tokens;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    const std::string where = absl::StrCat(file, ":", line_no, ": ");
    if (fields.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "want 'NAME TOKEN', got ", fields.size(), " fields"));
    }
    if (!ValidClientName(fields[0])) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "client name '", fields[0],
          "' must start with a letter and hold only letters, digits, '_', '-' and '.'"));
    }
    if (fields[1].size() < kMinClientTokenChars) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "the token of client ", fields[0], " has ", fields[1].size(),
                       " characters; it needs ", kMinClientTokenChars, " or more"));
    }
    if (!names.insert(std::string(fields[0])).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "client ", fields[0], " is named twice"));
    }
    if (!tokens.insert(std::string(fields[1])).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "client ", fields[0], "'s token is another client's too"));
    }
    if (fields[1] == cluster_token) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "client ", fields[0],
          "'s token is the --auth-token-file token, which the servers of the cluster share"));
    }
    out.push_back({std::string(fields[0]), std::string(fields[1])});
  }
  return out;
}

AuthPolicy::AuthPolicy(std::string token, PeerAllowList peers, std::vector<ClientToken> clients)
    : token_(std::move(token)), peers_(std::move(peers)), clients_(std::move(clients)) {
  for (const ClientToken& c : clients_) client_digests_.push_back(Digest(c.token));
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

int AuthPolicy::MatchClientToken(const grpc::ServerContextBase& context) const {
  if (clients_.empty()) return -1;
  absl::StatusOr<absl::string_view> token = BearerToken(context);
  if (!token.ok()) return -1;
  const rpc::Sha256Digest got = Digest(*token);
  int found = -1;
  // Every digest is compared (no early exit): the time taken says nothing of which matched.
  for (size_t i = 0; i < client_digests_.size(); ++i) {
    if (SameDigest(got, client_digests_[i])) found = static_cast<int>(i);
  }
  return found;
}

std::string AuthPolicy::ClientOf(const grpc::ServerContextBase& context) const {
  const int i = MatchClientToken(context);
  return i >= 0 ? clients_[i].name : AddressHost(PeerAddress(context));
}

grpc::Status AuthPolicy::CheckClient(const grpc::ServerContextBase& context) const {
  if (token_.empty() && clients_.empty()) return grpc::Status::OK;
  if (MatchClientToken(context) >= 0) return grpc::Status::OK;
  grpc::Status status;
  if (!token_.empty()) {
    status = CheckBearerToken(context, token_);
  } else if (absl::StatusOr<absl::string_view> sent = BearerToken(context); !sent.ok()) {
    status = Error(grpc::StatusCode::UNAUTHENTICATED, std::string(sent.status().message()));
  } else {
    // Only client tokens open this server: an empty --auth-token-file matches nothing.
    status = Error(grpc::StatusCode::PERMISSION_DENIED,
                   "wrong bearer token: not one of the server's --client-tokens");
  }
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
