#include "client/rpc_collectives.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/client_metrics.h"
#include "client/connection.h"
#include "client/remote_buffer.h"
#include "client/remote_device.h"
#include "core/status_macros.h"
#include "proto/protocol.h"

namespace tg::rpc {
namespace {

namespace pb = tensorgrid::v1;

// Collective ids: unique in the process, so that no two collectives of one session (or of
// two communicators over the same buffers) meet in a server's mailbox.
std::atomic<uint64_t> g_next_collective{1};

}  // namespace

absl::StatusOr<RpcCollectiveOptions> ParseCollectiveOptions(const char* route, const char* bf16) {
  RpcCollectiveOptions o;
  const std::string r = route == nullptr ? "" : route;
  if (r == "client") {
    o.route = AllReduceRoute::kClient;
  } else if (!r.empty() && r != "servers") {
    return absl::InvalidArgumentError(
        absl::StrCat("TG_RPC_ALLREDUCE='", r, "': want servers (the default) or client"));
  }
  const std::string b = bf16 == nullptr ? "" : bf16;
  if (b == "1") {
    o.bf16_wire = true;
  } else if (!b.empty() && b != "0") {
    return absl::InvalidArgumentError(
        absl::StrCat("TG_RPC_ALLREDUCE_BF16='", b, "': want 0 (the default) or 1"));
  }
  return o;
}

bool UseDirectAllReduce(size_t servers, uint32_t min_minor, uint64_t bytes) {
  return servers >= 3 && min_minor >= kMinorDirectReduce &&
         bytes * (servers - 1) <= kDirectMaxSendBytes;
}

RpcCollectives* RpcCollectives::Get() {
  static RpcCollectives* instance = [] {
    absl::StatusOr<RpcCollectiveOptions> o = ParseCollectiveOptions(
        std::getenv("TG_RPC_ALLREDUCE"), std::getenv("TG_RPC_ALLREDUCE_BF16"));
    if (!o.ok()) {
      std::fprintf(stderr, "tensorgrid: %s; using the defaults\n",
                   std::string(o.status().message()).c_str());
      o = RpcCollectiveOptions{};
    }
    return new RpcCollectives(*o);  // never destroyed: devices hold it until exit.
  }();
  return instance;
}

absl::StatusOr<std::unique_ptr<Communicator>> RpcCollectives::Init(
    absl::Span<Device* const> devices) {
  absl::flat_hash_set<Device*> seen;
  bool on_servers = options_.route == AllReduceRoute::kServers;
  for (Device* d : devices) {
    auto* remote = dynamic_cast<RemoteDevice*>(d);
    if (remote == nullptr || !seen.insert(d).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "RPC all-reduce needs distinct remote devices, got ", d != nullptr ? d->name() : "null"));
    }
    // A server before AllReduce would answer it UNIMPLEMENTED, and one before
    // PeerReduceStream could not take its peers' pieces: stage through the client.
    on_servers = on_servers && remote->connection()->hello().protocol_minor() >= kMinorReduceStream;
  }
  std::unique_ptr<RpcCommunicator> c(new RpcCommunicator(options_, on_servers));
  c->devices_.assign(devices.begin(), devices.end());
  return std::unique_ptr<Communicator>(std::move(c));
}

absl::StatusOr<std::vector<RemoteBuffer*>> RpcCommunicator::Check(
    absl::Span<Tensor* const> tensors) const {
  if (tensors.size() != devices_.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RPC all-reduce of %d tensors over %d devices", tensors.size(), devices_.size()));
  }
  std::vector<RemoteBuffer*> bufs;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor* t = tensors[i];
    auto* b = t == nullptr ? nullptr : dynamic_cast<RemoteBuffer*>(t->buffer);
    if (b == nullptr || b->type()->device() != devices_[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("RPC all-reduce: tensor ", i, " is not in memory of ", devices_[i]->name()));
    }
    if (t->type != DType::kF32 || !t->IsContiguous() ||
        t->NumElements() != tensors[0]->NumElements()) {
      return absl::InvalidArgumentError(
          absl::StrCat("RPC all-reduce needs contiguous f32 tensors of one size, got ",
                       DescribeTensor(*t), " and ", DescribeTensor(*tensors[0])));
    }
    bufs.push_back(b);
  }
  return bufs;
}

absl::Status RpcCommunicator::AllReduce(absl::Span<Tensor* const> tensors) {
  TG_ASSIGN_OR_RETURN(std::vector<RemoteBuffer*> bufs, Check(tensors));
  if (tensors.size() < 2 || tensors[0]->NumElements() == 0) return absl::OkStatus();
  return on_servers_ ? OnServers(tensors, bufs) : Staged(tensors, bufs);
}

absl::Status RpcCommunicator::OnServers(absl::Span<Tensor* const> tensors,
                                        absl::Span<RemoteBuffer* const> bufs) {
  // Servers in order of their first device; each with its devices' tensors.
  struct Server {
    Connection* connection;
    std::vector<size_t> members;
  };
  std::vector<Server> servers;
  for (size_t i = 0; i < bufs.size(); ++i) {
    Connection* c = bufs[i]->connection();
    auto it = std::find_if(servers.begin(), servers.end(),
                           [c](const Server& s) { return s.connection == c; });
    if (it == servers.end()) it = servers.insert(servers.end(), Server{c, {}});
    it->members.push_back(i);
  }
  // A grant not cached yet costs a round trip to its server, which first runs the commands
  // queued there, and one of them may wait for another server's part of an earlier
  // all-reduce: whatever a batch holds (Stream::BeginBatch) is sent everywhere first.
  const bool asks =
      servers.size() > 1 && std::any_of(servers.begin(), servers.end(), [&](const Server& s) {
        return !s.connection->HasPeerReadGrant(bufs[s.members[0]]->handle());
      });
  if (asks) {
    for (const Server& s : servers) TG_RETURN_IF_ERROR(s.connection->Flush());
  }
  pb::AllReduce base;
  base.set_collective(g_next_collective.fetch_add(1));
  base.set_count(static_cast<uint64_t>(tensors[0]->NumElements()));
  base.set_bf16_wire(options_.bf16_wire);
  uint32_t min_minor = kProtocolMinor;
  for (const Server& s : servers) {
    min_minor = std::min(min_minor, s.connection->hello().protocol_minor());
  }
  if (UseDirectAllReduce(servers.size(), min_minor, tensors[0]->NumBytes())) {
    base.set_algorithm(pb::AllReduce::DIRECT);
  }
  for (const Server& s : servers) {
    pb::CollectiveServer* cs = base.add_servers();
    cs->set_endpoint(s.connection->endpoint());
    if (servers.size() > 1) {
      // The capability peers present to this server; cached per buffer after the first.
      TG_ASSIGN_OR_RETURN(std::string grant,
                          s.connection->PeerReadGrant(bufs[s.members[0]]->handle()));
      cs->set_grant(std::move(grant));
    }
  }
  for (size_t r = 0; r < servers.size(); ++r) {
    pb::AllReduce cmd = base;
    cmd.set_rank(static_cast<uint32_t>(r));
    for (size_t i : servers[r].members) {
      pb::CollectiveTensor* t = cmd.add_tensors();
      t->set_device(static_cast<const RemoteDevice*>(devices_[i])->index());
      t->set_buffer(bufs[i]->handle());
      t->set_offset(bufs[i]->OffsetOf(*tensors[i]));
    }
    // One command per device, behind its queued work; only the completion comes back.
    for (size_t i : servers[r].members) {
      pb::SessionRequest request;
      *request.mutable_all_reduce() = cmd;
      request.mutable_all_reduce()->set_device(
          static_cast<const RemoteDevice*>(devices_[i])->index());
      TG_RETURN_IF_ERROR(servers[r].connection->Post(std::move(request)));
    }
  }
  ClientMetrics::Get().allreduce_on_servers.fetch_add(1);
  return absl::OkStatus();
}

absl::Status RpcCommunicator::Staged(absl::Span<Tensor* const> tensors,
                                     absl::Span<RemoteBuffer* const> bufs) {
  const size_t n = tensors.size();
  const size_t count = static_cast<size_t>(tensors[0]->NumElements());
  const size_t bytes = count * sizeof(float);
  staging_.resize(n * count);
  // Every read posted before any is waited for: one round trip per server, not per device.
  std::vector<Connection*> posted;
  for (size_t i = 0; i < n; ++i) {
    float* host = staging_.data() + i * count;
    if (bytes > kInlineWriteBytes) {
      TG_RETURN_IF_ERROR(bufs[i]->GetTensor(tensors[i], host, 0, bytes));
      continue;
    }
    TG_RETURN_IF_ERROR(bufs[i]->PostRead(bufs[i]->OffsetOf(*tensors[i]), host, bytes));
    if (std::find(posted.begin(), posted.end(), bufs[i]->connection()) == posted.end()) {
      posted.push_back(bufs[i]->connection());
    }
  }
  for (Connection* c : posted) TG_RETURN_IF_ERROR(c->Drain());
  float* sum = staging_.data();
  for (size_t i = 1; i < n; ++i) {
    const float* other = staging_.data() + i * count;
    for (size_t j = 0; j < count; ++j) sum[j] += other[j];
  }
  for (size_t i = 0; i < n; ++i) {
    TG_RETURN_IF_ERROR(bufs[i]->SetTensor(tensors[i], sum, 0, bytes));
  }
  ClientMetrics& m = ClientMetrics::Get();
  m.allreduce_staged.fetch_add(1);
  m.allreduce_client_bytes.fetch_add(2 * n * bytes);
  return absl::OkStatus();
}

}  // namespace tg::rpc
