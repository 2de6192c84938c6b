#include "server/peer_pushes.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/lost_endpoint.h"
#include "core/status_macros.h"
#include "server/grant_table.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/peer_client.h"
#include "server/random_id.h"
#include "tensorgrid/v1/tensorgrid.grpc.pb.h"

namespace tg::server {
namespace {

namespace pb = ::tensorgrid::v1;

constexpr Logger kLog("rpc-server");
constexpr size_t kMaxSenderKeyChars = 64;

PieceKey KeyOf(const std::string& grant, uint64_t tag) { return PieceKey{grant, tag, 0, 0, 0}; }

}  // namespace

absl::Status PeerPushes::Check(const pb::PeerPush& cmd) {
  if (cmd.endpoint().empty()) return absl::InvalidArgumentError("peer_push: no endpoint");
  if (cmd.pieces_size() == 0 || cmd.pieces_size() > kMaxPieces) {
    return absl::InvalidArgumentError(
        absl::StrFormat("peer_push: %d pieces (1 to %d in one push; send more pushes)",
                        cmd.pieces_size(), kMaxPieces));
  }
  uint64_t total = 0;
  for (const pb::PushPiece& p : cmd.pieces()) {
    if (p.grant().empty()) return absl::InvalidArgumentError("peer_push: a piece has no grant");
    if (p.size() > kMaxPushBytes - total) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "peer_push: more than %d bytes in one push (a piece of %d after %d); send more pushes",
          kMaxPushBytes, p.size(), total));
    }
    total += p.size();
  }
  return absl::OkStatus();
}

std::string PeerPushes::SenderKey(const std::string& session, const std::string& endpoint) {
  absl::MutexLock lock(&senders_mu_);
  Sender& sender = senders_[session];
  if (sender.key.empty()) sender.key = RandomHex(16);
  if (sender.destinations.size() < kMaxDestinations) sender.destinations.insert(endpoint);
  return sender.key;
}

void PeerPushes::SenderEnded(const std::string& session) {
  Sender sender;
  {
    absl::MutexLock lock(&senders_mu_);
    auto it = senders_.find(session);
    if (it == senders_.end()) return;
    sender = std::move(it->second);
    senders_.erase(it);
  }
  if (peers_ == nullptr) return;
  for (const std::string& endpoint : sender.destinations) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = peers_->ChannelFor(endpoint);
    if (!channel.ok()) continue;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + kSenderEndedDeadline));
    PeerClient::Authorize(peers_->auth_token(), &ctx);
    ctx.AddMetadata(kSenderEndedKey, sender.key);
    pb::PeerDeliverReply reply;
    // Best effort: a destination that is gone or slow sweeps the pieces itself.
    (void)pb::TensorGrid::NewStub(*channel)->PeerDeliver(&ctx, pb::PeerDeliverRequest(), &reply);
  }
}

absl::Status PeerPushes::Send(const pb::PeerPush& cmd,
                              absl::Span<const std::shared_ptr<SessionBuffer>> sources,
                              const std::string& session) {
  if (peers_ == nullptr) return absl::UnimplementedError("peer_push is not enabled");
  TG_RETURN_IF_ERROR(Check(cmd));
  if (sources.size() != static_cast<size_t>(cmd.pieces_size())) {
    return absl::InternalError("peer_push: a source buffer per piece expected");
  }
  for (const pb::PushPiece& p : cmd.pieces()) TG_RETURN_IF_ERROR(LostStatus(p.grant()));
  TG_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, peers_->ChannelFor(cmd.endpoint()));
  pb::PeerDeliverRequest request;
  for (int i = 0; i < cmd.pieces_size(); ++i) {
    const pb::PushPiece& p = cmd.pieces(i);
    pb::DeliveredPiece* d = request.add_pieces();
    d->set_grant(p.grant());
    d->set_tag(p.tag());
    std::string* data = d->mutable_data();
    data->resize(p.size());
    TG_RETURN_IF_ERROR(sources[i]->Read(p.offset(), data->data(), p.size()));
  }
  const std::string sender = session.empty() ? std::string() : SenderKey(session, cmd.endpoint());
  auto stub = pb::TensorGrid::NewStub(channel);
  auto deliver = [&](bool wait_for_ready, absl::Duration limit) {
    grpc::ClientContext ctx;
    ctx.set_wait_for_ready(wait_for_ready);
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + limit));
    PeerClient::Authorize(peers_->auth_token(), &ctx);
    if (!sender.empty()) ctx.AddMetadata(kSenderKey, sender);
    pb::PeerDeliverReply reply;
    return stub->PeerDeliver(&ctx, request, &reply);
  };
  grpc::Status status = deliver(false, kDeliverDeadline);
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    // A channel that saw the destination go (it restarted) refuses calls until it has dialed
    // again: one more try that waits for that, briefly.
    status = deliver(true, kReconnectWait);
    // The first try's pieces got there after all (only its answer was lost).
    if (status.error_code() == grpc::StatusCode::ALREADY_EXISTS) status = grpc::Status::OK;
  }
  absl::Status result = PeerClient::PeerStatus(cmd.endpoint(), status, "peer_push");
  if (absl::IsUnavailable(result)) {
    for (const pb::PushPiece& p : cmd.pieces()) RecordLost(p.grant(), result);
  }
  return result;
}

absl::Status PeerPushes::LostStatus(const std::string& grant) {
  absl::MutexLock lock(&lost_mu_);
  auto it = lost_.find(grant);
  if (it == lost_.end()) return absl::OkStatus();
  return KeepIdentity(it->second,
                      absl::Status(it->second.code(),
                                   absl::StrCat("an earlier piece of this buffer was lost: ",
                                                it->second.message())));
}

void PeerPushes::RecordLost(const std::string& grant, const absl::Status& status) {
  absl::MutexLock lock(&lost_mu_);
  if (lost_.size() >= kMaxLostGrants) lost_.clear();
  lost_.emplace(grant, status);
}

std::string PeerPushes::SenderIn(const grpc::ServerContextBase& context, const char* key) {
  const auto& metadata = context.client_metadata();
  // A key is 32 hex digits (SenderKey); anything longer is not one of ours and is not kept
  // beside every piece.
  auto it = metadata.find(key);
  if (it == metadata.end() || it->second.size() > kMaxSenderKeyChars) return std::string();
  return std::string(it->second.data(), it->second.size());
}

size_t PeerPushes::DropSender(absl::string_view sender) {
  size_t dropped = mailbox_.DropSender(sender);
  if (reduce_mailbox_ != nullptr) dropped += reduce_mailbox_->DropSender(sender);
  return dropped;
}

absl::Status PeerPushes::Receive(const grpc::ServerContext& context,
                                 const pb::PeerDeliverRequest& request) {
  if (request.pieces_size() == 0) {
    if (const std::string ended = SenderIn(context, kSenderEndedKey); !ended.empty()) {
      const size_t dropped = DropSender(ended);
      if (dropped > 0) {
        kLog.Info("pieces of an ended sender dropped", {{"bytes", dropped}});
      }
    }
    return absl::OkStatus();
  }
  return Receive(request, SenderIn(context, kSenderKey));
}

absl::Status PeerPushes::Receive(const pb::PeerDeliverRequest& request, std::string sender) {
  if (request.pieces_size() > kMaxPieces) {
    return absl::InvalidArgumentError(
        absl::StrFormat("peer_deliver: %d pieces (at most %d)", request.pieces_size(), kMaxPieces));
  }
  // Every piece is checked before any is filed: a delivery is taken whole or not at all.
  uint64_t total = 0;
  for (const pb::DeliveredPiece& p : request.pieces()) {
    if (grants_->Find(p.grant()) == nullptr) {
      return absl::NotFoundError("peer_deliver: unknown or revoked grant");
    }
    total += p.data().size();
  }
  if (total > kMaxPushBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "peer_deliver: %d bytes in one delivery (at most %d)", total, kMaxPushBytes));
  }
  for (int i = 0; i < request.pieces_size(); ++i) {
    const pb::DeliveredPiece& p = request.pieces(i);
    absl::Status s = mailbox_.Put(KeyOf(p.grant(), p.tag()), p.data(), "peer_deliver", sender);
    if (absl::IsAlreadyExists(s)) {
      s = absl::AlreadyExistsError(
          absl::StrFormat("peer_deliver: the piece tagged %d came twice", p.tag()));
    }
    if (!s.ok()) {
      // The pieces filed before it go again (uncharged), so that a retry files them anew.
      for (int j = 0; j < i; ++j) {
        mailbox_.Discard(KeyOf(request.pieces(j).grant(), request.pieces(j).tag()));
      }
      return s;
    }
  }
  if (metrics_ != nullptr) metrics_->PeerCopyBytes(total);
  return absl::OkStatus();
}

absl::Status PeerPushes::Await(const pb::AwaitPush& cmd, const std::string& grant,
                               SessionBuffer& dst, const std::function<bool()>& cancelled) {
  TG_RETURN_IF_ERROR(dst.CheckRange(cmd.dst_offset(), cmd.size()));
  TG_RETURN_IF_ERROR(LostStatus(grant));
  absl::Status status = AwaitPiece(cmd, grant, dst, cancelled);
  if (absl::IsDeadlineExceeded(status) || absl::IsUnavailable(status)) RecordLost(grant, status);
  return status;
}

absl::Status PeerPushes::AwaitPiece(const pb::AwaitPush& cmd, const std::string& grant,
                                    SessionBuffer& dst, const std::function<bool()>& cancelled) {
  int failures = 0;
  absl::StatusOr<std::string> data =
      mailbox_.Take(KeyOf(grant, cmd.tag()), absl::Now() + piece_wait_, kPeerPoll, [&] {
        if (cancelled && cancelled()) return ReduceMailbox::SessionEnded("await_push", cmd.endpoint());
        return peers_ == nullptr ? absl::OkStatus() : peers_->CheckAlive(cmd.endpoint(), &failures);
      });
  if (absl::IsDeadlineExceeded(data.status())) {
    return absl::DeadlineExceededError(
        absl::StrFormat("await_push: nothing tagged %d came from %s within %s", cmd.tag(),
                        cmd.endpoint(), absl::FormatDuration(piece_wait_)));
  }
  TG_RETURN_IF_ERROR(data.status());
  if (data->size() != cmd.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("await_push: the piece tagged %d from %s carries %d bytes, want %d",
                        cmd.tag(), cmd.endpoint(), data->size(), cmd.size()));
  }
  return dst.Write(cmd.dst_offset(), data->data(), data->size());
}

}  // namespace tg::server
