#include "server/collective_runner.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/fp16.h"
#include "core/status_macros.h"
#include "core/tensor.h"
#include "proto/protocol.h"
#include "server/grant_table.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/peer_client.h"
#include "server/peer_pushes.h"
#include "tensorgrid/v1/tensorgrid.grpc.pb.h"

namespace tg::server {
namespace {

namespace pb = ::tensorgrid::v1;

// Parts of this collective's bookkeeping kept at most; past it the finished ones go (a
// client that sent fewer commands than it announced leaves them behind).
constexpr size_t kMaxParts = 4096;

size_t WireBytes(size_t elements, bool bf16) {
  return elements * (bf16 ? sizeof(uint16_t) : sizeof(float));
}

size_t Parts(size_t bytes) {
  return std::max<size_t>(1, (bytes + rpc::kChunkBytes - 1) / rpc::kChunkBytes);
}

// The wire form of values [begin, end) of v.
std::string Encode(const std::vector<float>& v, size_t begin, size_t end, bool bf16) {
  std::string out(WireBytes(end - begin, bf16), '\0');
  if (!bf16) {
    std::memcpy(out.data(), v.data() + begin, out.size());
    return out;
  }
  for (size_t i = begin; i < end; ++i) {
    const uint16_t h = FloatToBF16(v[i]);
    std::memcpy(out.data() + (i - begin) * sizeof(h), &h, sizeof(h));
  }
  return out;
}

// Adds (or stores) wire values into v[at, ...).
void Decode(const std::string& wire, bool bf16, bool add, float* v) {
  const size_t n = wire.size() / (bf16 ? sizeof(uint16_t) : sizeof(float));
  for (size_t i = 0; i < n; ++i) {
    float x;
    if (bf16) {
      uint16_t h;
      std::memcpy(&h, wire.data() + i * sizeof(h), sizeof(h));
      x = BF16ToFloat(h);
    } else {
      std::memcpy(&x, wire.data() + i * sizeof(x), sizeof(x));
    }
    v[i] = add ? v[i] + x : x;
  }
}

}  // namespace

absl::Status CollectiveRunner::Run(const std::string& session_id, BufferFinder find,
                                   const pb::AllReduce& cmd,
                                   const std::function<bool()>& cancelled) {
  const std::pair<std::string, uint64_t> key(session_id, cmd.collective());
  std::shared_ptr<Part> part;
  bool first = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = parts_.find(key);
    if (it == parts_.end()) {
      if (parts_.size() >= kMaxParts) {
        absl::erase_if(parts_, [](const auto& p) { return p.second->done; });
      }
      part = std::make_shared<Part>();
      part->commands_left = std::max(1, cmd.tensors_size());
      parts_[key] = part;
      first = true;
    } else {
      part = it->second;
    }
    --part->commands_left;
  }
  absl::Status status;
  if (first) {
    status = RunPart(session_id, find, cmd, cancelled);
    absl::MutexLock lock(&mu_);
    part->done = true;
    part->status = status;
  } else {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](Part* p) { return p->done; }, part.get()));
    status = part->status;
  }
  absl::MutexLock lock(&mu_);
  if (part->done && part->commands_left <= 0) {
    auto it = parts_.find(key);
    if (it != parts_.end() && it->second == part) parts_.erase(it);
  }
  return status;
}

absl::StatusOr<CollectiveRunner::Local> CollectiveRunner::Resolve(BufferFinder find,
                                                                  const pb::AllReduce& cmd) const {
  // An enum value this build does not know (proto3 keeps it) would run as AUTO.
  if (!pb::AllReduce::Algorithm_IsValid(cmd.algorithm())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("all_reduce.algorithm %d is not one of AUTO (0), RING (1), BUTTERFLY (2), "
                        "DIRECT (3)",
                        static_cast<int>(cmd.algorithm())));
  }
  const int m = cmd.servers_size();
  if (m < 1 || m > kMaxServers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("all_reduce over %d servers (1 to %d)", m, kMaxServers));
  }
  if (cmd.rank() >= static_cast<uint32_t>(m)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("all_reduce: rank %d of %d servers", cmd.rank(), m));
  }
  if (cmd.tensors_size() < 1 || cmd.tensors_size() > kMaxLocalDevices) {
    return absl::InvalidArgumentError(
        absl::StrFormat("all_reduce with %d tensors on this server (1 to %d)", cmd.tensors_size(),
                        kMaxLocalDevices));
  }
  const uint64_t count = cmd.count();
  if (count == 0 || count > kMaxBytes / sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrFormat("all_reduce of %d f32 elements (1 to %d)",
                                                      count, kMaxBytes / sizeof(float)));
  }
  bool names_device = false;
  Local local;
  for (const pb::CollectiveTensor& t : cmd.tensors()) {
    TG_ASSIGN_OR_RETURN(std::shared_ptr<SessionBuffer> buf, find(t.buffer()));
    TG_RETURN_IF_ERROR(buf->CheckRange(t.offset(), count * sizeof(float)));
    if (buf->device_index() != static_cast<int>(t.device())) {
      return absl::InvalidArgumentError(
          absl::StrFormat("all_reduce: buffer %#x is on device %d, not %d", t.buffer(),
                          buf->device_index(), t.device()));
    }
    names_device = names_device || t.device() == cmd.device();
    local.buffers.push_back(std::move(buf));
    local.offsets.push_back(t.offset());
  }
  if (!names_device) {
    return absl::InvalidArgumentError(
        absl::StrFormat("all_reduce for device %d lists no tensor of that device", cmd.device()));
  }
  if (m > 1) {
    // The pieces this server takes are filed under its own grant: it must be one this
    // session made, or a client could read what peers send to another session.
    const std::shared_ptr<SessionBuffer> granted = grants_->Find(cmd.servers(cmd.rank()).grant());
    if (granted == nullptr || granted != local.buffers[0]) {
      return absl::PermissionDeniedError(
          absl::StrFormat("all_reduce: servers[%d].grant is not this session's grant of buffer %#x",
                          cmd.rank(), cmd.tensors(0).buffer()));
    }
  }
  return local;
}

absl::Status CollectiveRunner::RunPart(const std::string& session_id, BufferFinder find,
                                       const pb::AllReduce& cmd,
                                       const std::function<bool()>& cancelled) {
  TG_ASSIGN_OR_RETURN(const Local local, Resolve(find, cmd));
  const int m = cmd.servers_size();
  // Every peer is checked before anything is sent: one outside --peers fails the command
  // with no connection made to any.
  for (int r = 0; r < m; ++r) {
    if (r == static_cast<int>(cmd.rank())) continue;
    TG_RETURN_IF_ERROR(peers_->ChannelFor(cmd.servers(r).endpoint()).status());
  }
  const size_t count = cmd.count();
  std::vector<float> sum;
  TG_RETURN_IF_ERROR(LocalSum(local, count, &sum));
  if (m > 1) {
    absl::Status s = Exchange(session_id, cmd, cancelled, &sum);
    mailbox_.Drop(cmd.servers(cmd.rank()).grant(), cmd.collective());
    TG_RETURN_IF_ERROR(s);
  }
  for (size_t i = 0; i < local.buffers.size(); ++i) {
    TG_RETURN_IF_ERROR(
        local.buffers[i]->Write(local.offsets[i], sum.data(), count * sizeof(float)));
  }
  return absl::OkStatus();
}

absl::Status CollectiveRunner::LocalSum(const Local& local, size_t count, std::vector<float>* sum) {
  const size_t bytes = count * sizeof(float);
  sum->resize(count);
  const size_t n = local.buffers.size();
  std::vector<Device*> devices;
  for (const auto& b : local.buffers) devices.push_back(b->buffer()->type()->device());
  Collectives* family = devices[0]->collectives();
  bool shared = n > 1 && family != nullptr;
  for (Device* d : devices) shared = shared && d->collectives() == family;
  if (shared) {
    absl::MutexLock lock(&comm_mu_);
    auto it = communicators_.find(devices);
    if (it == communicators_.end()) {
      absl::StatusOr<std::unique_ptr<Communicator>> c = family->Init(devices);
      // A family that cannot set its collectives up here still gets the host sum.
      if (c.ok()) it = communicators_.emplace(devices, std::move(*c)).first;
    }
    if (it != communicators_.end()) {
      std::vector<Tensor> tensors(n);
      std::vector<Tensor*> ptrs;
      for (size_t i = 0; i < n; ++i) {
        Tensor& t = tensors[i];
        t.type = DType::kF32;
        t.ne[0] = static_cast<int64_t>(count);
        SetContiguousStrides(&t);
        t.buffer = local.buffers[i]->buffer();
        t.data = static_cast<uint8_t*>(t.buffer->base()) + local.offsets[i];
        ptrs.push_back(&t);
      }
      TG_RETURN_IF_ERROR(it->second->AllReduce(ptrs));
      return local.buffers[0]->Read(local.offsets[0], sum->data(), bytes);
    }
  }
  TG_RETURN_IF_ERROR(local.buffers[0]->Read(local.offsets[0], sum->data(), bytes));
  std::vector<float> other(n > 1 ? count : 0);
  for (size_t i = 1; i < n; ++i) {
    TG_RETURN_IF_ERROR(local.buffers[i]->Read(local.offsets[i], other.data(), bytes));
    for (size_t j = 0; j < count; ++j) (*sum)[j] += other[j];
  }
  return absl::OkStatus();
}

absl::Status CollectiveRunner::Exchange(const std::string& session_id, const pb::AllReduce& cmd,
                                        const std::function<bool()>& cancelled,
                                        std::vector<float>* sum) {
  const int m = cmd.servers_size();
  const int rank = static_cast<int>(cmd.rank());
  const size_t count = sum->size();
  const bool direct = cmd.algorithm() == pb::AllReduce::DIRECT;
  // Two servers: the butterfly sends the same bytes as the ring in one step instead of two,
  // so the ring is worth it there only for BF16 on the wire.
  const bool ring = cmd.algorithm() == pb::AllReduce::RING ||
                    (cmd.algorithm() == pb::AllReduce::AUTO &&
                     count * sizeof(float) >= kRingMinBytes && (m > 2 || cmd.bf16_wire()));
  // BF16 only in the ring: there each chunk's owner rounds it once and the rest copy it;
  // butterfly partners would each add the other's rounded values and end apart.
  const bool bf16 = ring && cmd.bf16_wire();
  const std::vector<ExchangeStep> steps = direct ? DirectSchedule(m, rank, count)
                                          : ring ? RingSchedule(m, rank, count)
                                                 : ButterflySchedule(m, rank, count);
  // What this server brings, where a schedule adds it in later (direct).
  std::vector<float> own;
  if (std::any_of(steps.begin(), steps.end(), [](const ExchangeStep& s) { return s.add_own; })) {
    own = *sum;
  }
  const absl::Time deadline = absl::Now() + kPieceWait;
  // The streams to the peers this server sends to, each opened once.
  std::vector<std::shared_ptr<PeerReduceStream>> streams(m);
  PeerLinksOut links(m);
  for (const ExchangeStep& step : steps) {
    if (step.send_to < 0 || streams[step.send_to] != nullptr) continue;
    const pb::CollectiveServer& to = cmd.servers(step.send_to);
    TG_ASSIGN_OR_RETURN(streams[step.send_to], StreamFor(session_id, to.endpoint()));
    if (WireBytes(step.send_end - step.send_begin, bf16) <= kMaxLinkPieceBytes) {
      links[step.send_to] =
          LinkFor(session_id, to.endpoint(), to.grant(), cmd.servers(rank).endpoint());
    }
  }
  for (const ExchangeStep& step : steps) {
    if (step.send_to >= 0) {
      TG_RETURN_IF_ERROR(
          Push(cmd, step, bf16, *sum, *streams[step.send_to], links[step.send_to].get()));
    }
    if (step.recv_from >= 0) {
      TG_RETURN_IF_ERROR(Pull(cmd, step, bf16, deadline, streams, links, cancelled, sum));
    }
    if (step.add_own) {
      for (size_t i = step.recv_begin; i < step.recv_end; ++i) (*sum)[i] += own[i];
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<PeerReduceStream>> CollectiveRunner::StreamFor(
    const std::string& session_id, const std::string& endpoint) {
  TG_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, peers_->ChannelFor(endpoint));
  std::shared_ptr<PeerReduceStream> ended;  // destroyed (waited for) outside the lock.
  absl::MutexLock lock(&streams_mu_);
  std::shared_ptr<PeerReduceStream>& stream = streams_[{session_id, endpoint}];
  // A stream that ended (the peer restarted, or refused a piece) failed the collective that
  // saw it; the next one opens a new stream.
  if (stream != nullptr && stream->ended()) ended = std::move(stream);
  if (stream == nullptr) {
    const std::string sender =
        senders_ == nullptr ? std::string() : senders_->SenderKey(session_id, endpoint);
    stream = std::make_shared<PeerReduceStream>(channel, endpoint, peers_->auth_token(), sender);
  }
  return stream;
}

void CollectiveRunner::EndSession(const std::string& session_id) {
  std::vector<std::shared_ptr<PeerReduceStream>> ended;  // closed outside the lock.
  std::vector<std::shared_ptr<OutLink>> closed;
  absl::MutexLock lock(&streams_mu_);
  absl::erase_if(out_links_, [&](auto& l) {
    if (std::get<0>(l.first) != session_id) return false;
    closed.push_back(std::move(l.second));
    return true;
  });
  for (auto it = streams_.begin(); it != streams_.end();) {
    if (it->first.first == session_id) {
      ended.push_back(std::move(it->second));
      streams_.erase(it++);
    } else {
      ++it;
    }
  }
}

std::shared_ptr<OutLink> CollectiveRunner::LinkFor(const std::string& session_id,
                                                   const std::string& endpoint,
                                                   const std::string& grant,
                                                   const std::string& from) {
  if (!LinksOn()) return nullptr;
  const auto key = std::make_tuple(session_id, endpoint, grant);
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&streams_mu_);
    auto no = no_link_until_.find(endpoint);
    if (no != no_link_until_.end() && now < no->second) return nullptr;
    auto it = out_links_.find(key);
    // A link that broke, or that the peer closed (a piece refused), is dialed again.
    if (it != out_links_.end() && !it->second->broken() && !it->second->ClosedByPeer()) {
      return it->second;
    }
  }
  // The peer's ticket and the connection: once per session, peer and grant.
  absl::StatusOr<std::shared_ptr<OutLink>> link =
      [&]() -> absl::StatusOr<std::shared_ptr<OutLink>> {
    TG_ASSIGN_OR_RETURN(const PeerClient::LinkOffer offer, peers_->OfferLink(endpoint));
    LinkHello hello;
    hello.ticket = offer.ticket;
    hello.sender = senders_ == nullptr ? std::string() : senders_->SenderKey(session_id, endpoint);
    hello.grant = grant;
    hello.from = from;
    return OutLink::Dial(offer.host, offer.port, hello, PeerLinks::kHelloWait);
  }();
  absl::MutexLock lock(&streams_mu_);
  if (!link.ok()) {
    kServerLog.Info("no peer link, all-reduce pieces keep the stream",
                    {{"endpoint", endpoint}, {"why", link.status().message()}});
    no_link_until_[endpoint] = now + kLinkRetry;
    return nullptr;
  }
  if (out_links_.size() >= kMaxOutLinks) out_links_.erase(out_links_.begin());
  out_links_[key] = *link;
  return *std::move(link);
}

absl::Status CollectiveRunner::Push(const pb::AllReduce& cmd, const ExchangeStep& step, bool bf16,
                                    const std::vector<float>& sum, PeerReduceStream& stream,
                                    OutLink* link) {
  const pb::CollectiveServer& to = cmd.servers(step.send_to);
  const std::string wire = Encode(sum, step.send_begin, step.send_end, bf16);
  if (link != nullptr && wire.size() <= kMaxLinkPieceBytes) {
    LinkPieceHeader h;
    h.collective = cmd.collective();
    h.step = step.id;
    h.part = 0;
    h.from_rank = cmd.rank();
    h.bytes = static_cast<uint32_t>(wire.size());
    absl::Status sent = link->Send(h, wire);
    if (sent.ok()) {
      ++link_pieces_sent_;
      return absl::OkStatus();
    }
    // The peer never filed a piece its link did not bring whole: the stream takes it, and
    // says why if the peer cannot be reached or refuses it. The next collective dials again.
    kServerLog.Info("peer link broke, the piece takes the stream",
                    {{"endpoint", to.endpoint()}, {"error", sent.message()}});
  }
  const size_t parts = Parts(wire.size());
  for (size_t p = 0; p < parts; ++p) {
    pb::PeerReduceRequest req;
    req.set_grant(to.grant());
    req.set_collective(cmd.collective());
    req.set_step(step.id);
    req.set_part(static_cast<uint32_t>(p));
    req.set_from_rank(cmd.rank());
    const size_t at = p * rpc::kChunkBytes;
    req.set_data(wire.substr(at, std::min(rpc::kChunkBytes, wire.size() - at)));
    TG_RETURN_IF_ERROR(stream.Send(std::move(req)));
  }
  return absl::OkStatus();
}

absl::Status CollectiveRunner::Pull(const pb::AllReduce& cmd, const ExchangeStep& step, bool bf16,
                                    absl::Time deadline, const PeerStreams& streams,
                                    const PeerLinksOut& links,
                                    const std::function<bool()>& cancelled,
                                    std::vector<float>* sum) {
  const std::string& from = cmd.servers(step.recv_from).endpoint();
  const size_t want = WireBytes(step.recv_end - step.recv_begin, bf16);
  const size_t parts = Parts(want);
  int failures = 0;
  size_t got = 0;
  auto check = [&] {
    if (cancelled && cancelled()) return ReduceMailbox::SessionEnded("all_reduce", from);
    // A piece of ours the peers refused, or could not be sent, fails the exchange.
    for (const auto& s : streams) {
      if (s != nullptr) TG_RETURN_IF_ERROR(s->status());
    }
    for (size_t r = 0; r < links.size(); ++r) {
      if (links[r] != nullptr && links[r]->ClosedByPeer()) {
        return absl::FailedPreconditionError(
            absl::StrCat("all_reduce: ", cmd.servers(r).endpoint(),
                         " closed its peer link (its session ended or it refused a piece)"));
      }
    }
    return peers_->CheckAlive(from, &failures);
  };
  for (size_t p = 0; p < parts; ++p) {
    PieceKey key{cmd.servers(cmd.rank()).grant(), cmd.collective(), step.id,
                 static_cast<uint32_t>(p), static_cast<uint32_t>(step.recv_from)};
    TG_ASSIGN_OR_RETURN(std::string wire,
                        LinksOn() && want <= kMaxLinkPieceBytes
                            ? TakeLinkable(key, from, deadline, check)
                            : mailbox_.Take(key, deadline, kPeerPoll, check));
    const size_t expect = std::min(rpc::kChunkBytes, want - got);
    if (wire.size() != expect) {
      return absl::InvalidArgumentError(
          absl::StrFormat("peer_reduce from %s: step %d part %d carries %d bytes, want %d", from,
                          step.id, p, wire.size(), expect));
    }
    const size_t elem = bf16 ? sizeof(uint16_t) : sizeof(float);
    Decode(wire, bf16, step.add, sum->data() + step.recv_begin + got / elem);
    got += wire.size();
  }
  if (bf16 && step.final_sum) {
    for (size_t i = step.recv_begin; i < step.recv_end; ++i) {
      (*sum)[i] = BF16ToFloat(FloatToBF16((*sum)[i]));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> CollectiveRunner::TakeLinkable(
    const PieceKey& key, const std::string& from, absl::Time deadline,
    absl::FunctionRef<absl::Status()> check) {
  // The first look comes early, as in ReduceMailbox::Take.
  absl::Time next_check = absl::Now() + ReduceMailbox::kFirstCheck;
  for (;;) {
    const absl::Time now = absl::Now();
    if (links_->Linked(key.grant, from)) {
      if (std::optional<std::string> piece =
              links_->Take(key, from, std::min(deadline, next_check) - now, mailbox_)) {
        return *std::move(piece);
      }
    } else {
      // From the stream; a link the peer opens meanwhile is seen within kLinkLook.
      absl::StatusOr<std::string> piece =
          mailbox_.Take(key, std::min({deadline, next_check, now + kLinkLook}), kPeerPoll, check);
      if (piece.ok() || !absl::IsDeadlineExceeded(piece.status())) return piece;
    }
    const absl::Time after = absl::Now();
    if (after >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrFormat("all-reduce %d: no data from rank %d for step %d in time", key.collective,
                          key.from_rank, key.step));
    }
    if (after >= next_check) {
      TG_RETURN_IF_ERROR(check());
      next_check = after + kPeerPoll;
    }
  }
}

absl::Status CollectiveRunner::Receive(const pb::PeerReduceRequest& request, std::string sender) {
  if (grants_->Find(request.grant()) == nullptr) {
    return absl::NotFoundError("peer_reduce: unknown or revoked grant");
  }
  if (request.data().size() > rpc::kChunkBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "peer_reduce: a piece of %d bytes (at most %d)", request.data().size(), rpc::kChunkBytes));
  }
  const size_t n = request.data().size();
  TG_RETURN_IF_ERROR(mailbox_.Put(
      {request.grant(), request.collective(), request.step(), request.part(), request.from_rank()},
      request.data(), "peer_reduce", std::move(sender)));
  if (metrics_ != nullptr) metrics_->PeerCopyBytes(n);
  return absl::OkStatus();
}

}  // namespace tg::server
