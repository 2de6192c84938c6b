#include "server/peer_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/lost_endpoint.h"
#include "core/status_macros.h"
#include "proto/grpc_channel.h"
#include "proto/protocol.h"
#include "server/auth_policy.h"
#include "server/log.h"
#include "tensorgrid/v1/tensorgrid.grpc.pb.h"

namespace tg::server {
namespace {

namespace pb = ::tensorgrid::v1;

constexpr size_t kMaxChannels = 64;
constexpr size_t kMaxEndpointChars = 256;
constexpr auto kPullDeadline = std::chrono::minutes(10);
constexpr auto kLinkOfferDeadline = std::chrono::seconds(2);
// A checked endpoint is checked (and its name resolved) again after this long, so that a
// peer moving to a new address is followed; not on every pull, which runs once per token.
constexpr absl::Duration kRecheckAfter = absl::Seconds(30);

// The codes a failed connection, a TLS handshake or a peer that does not speak gRPC produce;
// a real peer's PeerCopy answers with others (NOT_FOUND for a revoked grant, ...).
bool TransportFailure(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::UNKNOWN ||
         code == grpc::StatusCode::INTERNAL || code == grpc::StatusCode::DEADLINE_EXCEEDED;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> PeerClient::ChannelFor(const std::string& endpoint) {
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    auto it = peers_.find(endpoint);
    if (it != peers_.end() && now - it->second.checked < kRecheckAfter) return it->second.channel;
  }
  // Resolving may block: outside the lock.
  TG_ASSIGN_OR_RETURN(PeerTarget target, options_.allowed.Check(endpoint));
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(endpoint);
  if (it != peers_.end() && it->second.address == target.address) {
    it->second.checked = now;
    return it->second.channel;
  }
  if (it == peers_.end() && peers_.size() >= kMaxChannels) peers_.erase(peers_.begin());
  rpc::ChannelTls tls = options_.tls;
  tls.target_name = target.server_name;
  Peer& peer = peers_[endpoint];
  peer = {target.address, rpc::NewChannel(target.address, tls), now};
  return peer.channel;
}

absl::Status PeerClient::PeerStatus(const std::string& endpoint, const grpc::Status& status,
                                    absl::string_view call) {
  if (status.ok()) return absl::OkStatus();
  if (TransportFailure(status.error_code())) {
    kServerLog.Warn("peer unreachable", {{"endpoint", endpoint},
                                         {"call", call},
                                         {"code", static_cast<int>(status.error_code())},
                                         {"error", status.error_message()}});
    return Unreachable(endpoint);
  }
  // The peer answered: it is alive, but its error may say that it lost another server.
  absl::Status answered(static_cast<absl::StatusCode>(status.error_code()),
                        absl::StrCat(call, " from ", endpoint, ": ", status.error_message()));
  pb::ErrorDetails details;
  if (!status.error_details().empty() && details.ParseFromString(status.error_details())) {
    SetLostEndpoint(answered, details.lost_endpoint());
  }
  return answered;
}

std::string PeerClient::IdentityDetails(const absl::Status& status) {
  const std::optional<std::string> lost = LostEndpoint(status);
  if (!lost.has_value()) return "";
  pb::ErrorDetails details;
  details.set_code(static_cast<int32_t>(status.code()));
  details.set_message(std::string(status.message()));
  details.set_lost_endpoint(*lost);
  return details.SerializeAsString();
}

absl::Status PeerClient::Unreachable(absl::string_view endpoint) {
  return WithLostEndpoint(absl::UnavailableError(absl::StrCat("peer unreachable: ", endpoint)),
                          endpoint);
}

absl::StatusOr<PeerClient::LinkOffer> PeerClient::OfferLink(const std::string& endpoint) {
  if (!options_.tls.ca_pem.empty()) {
    return absl::FailedPreconditionError("peer calls use TLS; a peer link would not");
  }
  TG_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, ChannelFor(endpoint));
  std::string address;
  {
    absl::MutexLock lock(&mu_);
    auto it = peers_.find(endpoint);
    if (it == peers_.end()) return Unreachable(endpoint);
    address = it->second.address;
  }
  grpc::ClientContext ctx;
  Authorize(options_.auth_token, &ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + kLinkOfferDeadline);
  pb::PeerLinkRequest req;
  pb::PeerLinkReply reply;
  TG_RETURN_IF_ERROR(PeerStatus(
      endpoint, pb::TensorGrid::NewStub(channel)->PeerLink(&ctx, req, &reply), "peer_link"));
  if (reply.port() == 0 || reply.port() > 65535) {
    return absl::InvalidArgumentError(
        absl::StrFormat("peer_link from %s: port %d", endpoint, reply.port()));
  }
  return LinkOffer{AddressHost(address), static_cast<int>(reply.port()), reply.ticket()};
}

void PeerClient::Authorize(const std::string& token, grpc::ClientContext* context) {
  if (!token.empty()) context->AddMetadata(rpc::kAuthMetadataKey, absl::StrCat("Bearer ", token));
}

absl::Status PeerClient::CheckAlive(const std::string& endpoint, int* failures) {
  TG_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, ChannelFor(endpoint));
  // try_to_connect: a channel that went idle when its connection closed dials again, so
  // that a peer that is gone shows as a failure.
  const grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/true);
  const bool failed = state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_SHUTDOWN;
  // Dialing again (or idle, about to) says nothing yet: with the short reconnect backoff
  // (rpc::kMaxReconnectBackoffMs) a peer that is down shows as dialing between failures.
  if (failed) {
    ++*failures;
  } else if (state == GRPC_CHANNEL_READY) {
    *failures = 0;
  }
  if (*failures >= kFailedPolls) return Unreachable(endpoint);
  return absl::OkStatus();
}

absl::Status PeerClient::Pull(const std::string& endpoint, const std::string& grant,
                              uint64_t src_offset, uint64_t size, SessionBuffer& dst,
                              uint64_t dst_offset, uint64_t after) {
  if (endpoint.empty() || endpoint.size() > kMaxEndpointChars) {
    return absl::InvalidArgumentError("peer_pull: endpoint must be host:port");
  }
  if (grant.empty()) return absl::InvalidArgumentError("peer_pull: no grant");
  TG_RETURN_IF_ERROR(dst.CheckRange(dst_offset, size));
  if (src_offset > UINT64_MAX - size) {
    return absl::InvalidArgumentError("peer_pull: source range overflows");
  }
  TG_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, ChannelFor(endpoint));
  auto stub = pb::TensorGrid::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kPullDeadline);
  Authorize(options_.auth_token, &ctx);
  pb::PeerCopyRequest req;
  req.set_grant(grant);
  req.set_offset(src_offset);
  req.set_size(size);
  req.set_after(after);
  std::unique_ptr<grpc::ClientReader<pb::DataChunk>> reader = stub->PeerCopy(&ctx, req);
  pb::DataChunk chunk;
  uint64_t received = 0;
  absl::Status write_status;
  while (reader->Read(&chunk)) {
    const uint64_t n = chunk.data().size();
    if (n > size - received) {
      ctx.TryCancel();
      write_status = absl::DataLossError(
          absl::StrFormat("peer_pull: %s sent more than the %d bytes asked for", endpoint, size));
      break;
    }
    write_status = dst.Write(dst_offset + received, chunk.data().data(), n);
    if (!write_status.ok()) {
      ctx.TryCancel();
      break;
    }
    received += n;
  }
  const grpc::Status st = reader->Finish();
  TG_RETURN_IF_ERROR(write_status);
  TG_RETURN_IF_ERROR(PeerStatus(endpoint, st, "peer_pull"));
  if (received != size) {
    return absl::DataLossError(
        absl::StrFormat("peer_pull: %s sent %d of %d bytes", endpoint, received, size));
  }
  return absl::OkStatus();
}

}  // namespace tg::server
