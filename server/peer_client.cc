#include "server/peer_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "proto/grpc_channel.h"
#include "tensorgrid/v1/tensorgrid.grpc.pb.h"

namespace tg::server {
namespace {

namespace pb = ::tensorgrid::v1;

constexpr size_t kMaxChannels = 64;
constexpr size_t kMaxEndpointChars = 256;
constexpr auto kPullDeadline = std::chrono::minutes(10);

}  // namespace

std::shared_ptr<grpc::Channel> PeerClient::ChannelFor(const std::string& endpoint) {
  absl::MutexLock lock(&mu_);
  auto it = channels_.find(endpoint);
  if (it != channels_.end()) return it->second;
  if (channels_.size() >= kMaxChannels) channels_.erase(channels_.begin());
  auto channel = rpc::NewChannel(endpoint, {.ca_pem = tls_ca_pem_});
  channels_[endpoint] = channel;
  return channel;
}

absl::Status PeerClient::Pull(const std::string& endpoint, const std::string& grant,
                              uint64_t src_offset, uint64_t size, SessionBuffer& dst,
                              uint64_t dst_offset) {
  if (endpoint.empty() || endpoint.size() > kMaxEndpointChars) {
    return absl::InvalidArgumentError("peer_pull: endpoint must be host:port");
  }
  if (grant.empty()) return absl::InvalidArgumentError("peer_pull: no grant");
  TG_RETURN_IF_ERROR(dst.CheckRange(dst_offset, size));
  if (src_offset > UINT64_MAX - size) {
    return absl::InvalidArgumentError("peer_pull: source range overflows");
  }
  auto stub = pb::TensorGrid::NewStub(ChannelFor(endpoint));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kPullDeadline);
  pb::PeerCopyRequest req;
  req.set_grant(grant);
  req.set_offset(src_offset);
  req.set_size(size);
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
  if (!st.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                        absl::StrCat("peer_pull from ", endpoint, ": ", st.error_message()));
  }
  if (received != size) {
    return absl::DataLossError(
        absl::StrFormat("peer_pull: %s sent %d of %d bytes", endpoint, received, size));
  }
  return absl::OkStatus();
}

}  // namespace tg::server
