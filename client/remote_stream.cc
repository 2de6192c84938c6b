#include "client/remote_stream.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/graph_encoder.h"
#include "client/inline_outputs.h"
#include "client/remote_buffer.h"
#include "client/remote_device.h"
#include "core/status_macros.h"

namespace tg::rpc {
namespace {
namespace pb = tensorgrid::v1;

// t's memory when it is on `device`'s server.
absl::StatusOr<RemoteBuffer*> BufferOn(const RemoteDevice& device, const Tensor& t) {
  auto* buffer = dynamic_cast<RemoteBuffer*>(t.buffer);
  if (buffer == nullptr || buffer->connection() != device.connection()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", t.name, "' is not in memory of ", device.name(), " (",
        t.buffer == nullptr ? "no buffer" : std::string(t.buffer->type()->name()), ")"));
  }
  return buffer;
}

}  // namespace

// The byte ranges a Compute asked for inline, and the GetTensorAsync readers waiting for
// them. The reply handler (on whichever thread drains the connection) fills the readers.
struct RemoteStream::PendingOutputs {
  struct Range {
    uint64_t buffer, offset, size;
  };
  struct Reader {
    uint64_t buffer, offset, size;
    void* data;
  };
  std::vector<Range> ranges;  // fixed before the Compute is sent.
  absl::Mutex mu;
  bool answered ABSL_GUARDED_BY(mu) = false;
  std::vector<Reader> readers ABSL_GUARDED_BY(mu);

  // True when [offset, offset + size) of `buffer` is inside one of the ranges and the reply
  // has not been handled yet: the handler will copy the bytes into data.
  bool Attach(uint64_t buffer, uint64_t offset, uint64_t size, void* data) {
    absl::MutexLock lock(&mu);
    if (answered) return false;
    for (const Range& r : ranges) {
      if (r.buffer == buffer && RangeInside(offset, size, r.offset, r.size)) {
        readers.push_back({buffer, offset, size, data});
        return true;
      }
    }
    return false;
  }

  // Copies range i's bytes to the readers inside it.
  void Deliver(size_t i, const std::string& bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const Range& r = ranges[i];
    for (const Reader& reader : readers) {
      if (reader.buffer == r.buffer &&
          RangeInside(reader.offset, reader.size, r.offset, bytes.size())) {
        std::memcpy(reader.data, bytes.data() + (reader.offset - r.offset), reader.size);
      }
    }
  }
};

// The PeerPush a source stream builds for one destination, and the destination's AwaitPush
// commands for its pieces. Sent as a whole, the push first, so that no wait on the
// destination can reach an await whose piece is still held here.
struct RemoteStream::HeldPush {
  Connection* source = nullptr;
  Connection* destination = nullptr;
  pb::SessionRequest push;  // peer_push; no pieces: nothing held.
  std::vector<pb::SessionRequest> awaits;
  size_t bytes = 0;

  bool empty() const { return push.peer_push().pieces_size() == 0; }
  void Drop() {
    push.Clear();
    awaits.clear();
    bytes = 0;
  }
  absl::Status Send() {
    if (empty()) return absl::OkStatus();
    pb::SessionRequest request = std::move(push);
    std::vector<pb::SessionRequest> waits = std::move(awaits);
    Drop();  // what was moved from is left empty, as held pushes are.
    TG_RETURN_IF_ERROR(source->Post(std::move(request)));
    // The destination may be waited for before this source's next command: send it now.
    TG_RETURN_IF_ERROR(source->Flush());
    for (pb::SessionRequest& wait : waits) TG_RETURN_IF_ERROR(destination->Post(std::move(wait)));
    return absl::OkStatus();
  }
};

absl::Status RemoteEvent::Synchronize() {
  return id_ == 0 ? absl::OkStatus() : connection_->WaitFor(id_);
}

RemoteStream::RemoteStream(RemoteDevice* device)
    : device_(device),
      compute_ns_(std::make_shared<std::atomic<int64_t>>(0)),
      push_(std::make_shared<HeldPush>()) {}

RemoteStream::~RemoteStream() {
  // Held pushes are dropped, not sent: no Compute of their destination will read them (it
  // would have sent them), and awaits sent now could only fail later, on a connection
  // that outlives this stream (a failover reloading on the servers left).
  push_->Drop();
  for (const std::shared_ptr<HeldPush>& held : pushed_here_) held->Drop();
  (void)SendHeldPulls();
}

Device* RemoteStream::device() const { return device_; }

absl::Status RemoteStream::SendHeldPulls() {
  if (!pulls_held_) return absl::OkStatus();
  pulls_held_ = false;
  return device_->connection()->EndBatch();
}

absl::Status RemoteStream::SendHeldPushes() {
  absl::Status status = push_->Send();
  for (const std::shared_ptr<HeldPush>& held : pushed_here_) status.Update(held->Send());
  pushed_here_.clear();
  return status;
}

absl::Status RemoteStream::SendHeld() {
  absl::Status status = SendHeldPushes();
  status.Update(SendHeldPulls());
  return status;
}

absl::Status RemoteStream::Synchronize() {
  TG_RETURN_IF_ERROR(SendHeld());
  return device_->connection()->Drain();
}

absl::Status RemoteStream::Compute(Graph& graph) {
  Connection* connection = device_->connection();
  // The pulls held and the awaits of pushes into this stream go in one message with the
  // Compute that reads what they bring (SendHeldPulls at the end sends it).
  if (!pulls_held_) {
    connection->BeginBatch();
    pulls_held_ = true;
  }
  TG_RETURN_IF_ERROR(SendHeldPushes());
  auto locate = [&](const Tensor& t) -> absl::StatusOr<RemoteLocation> {
    TG_ASSIGN_OR_RETURN(RemoteBuffer * buffer, BufferOn(*device_, t));
    return RemoteLocation{buffer->handle(), buffer->OffsetOf(t)};
  };
  TG_ASSIGN_OR_RETURN(const uint64_t key, GraphKey(graph, locate));
  pb::SessionRequest request;
  pb::Compute* c = request.mutable_compute();
  c->set_device(device_->index());
  c->set_graph_key(key);
  if (!connection->sent_graphs().Known(key)) {
    TG_ASSIGN_OR_RETURN(EncodedGraph encoded, EncodeGraph(graph, locate));
    connection->sent_graphs().Sent(key, static_cast<size_t>(encoded.desc.tensors_size()));
    *c->mutable_graph() = std::move(encoded.desc);
  }

  // Small outputs come back inline; the reply handler files them for GetTensor and fills
  // the GetTensorAsync readers.
  auto pending = std::make_shared<PendingOutputs>();
  size_t inline_bytes = 0;
  for (const Tensor* node : graph.nodes) {
    if (!node->HasFlag(kFlagOutput) || node->buffer == nullptr) continue;
    const size_t bytes = node->NumBytes();
    auto* buffer = dynamic_cast<RemoteBuffer*>(node->buffer);
    if (buffer == nullptr || inline_bytes + bytes > kInlineOutputBytes) continue;
    inline_bytes += bytes;
    pb::Range* r = c->add_outputs();
    r->set_buffer(buffer->handle());
    r->set_offset(buffer->OffsetOf(*node));
    r->set_size(bytes);
    pending->ranges.push_back({r->buffer(), r->offset(), r->size()});
  }
  ++splits_;
  std::shared_ptr<std::atomic<int64_t>> compute_ns = compute_ns_;
  uint64_t id = 0;
  TG_RETURN_IF_ERROR(connection->Post(
      std::move(request),
      [connection, pending, compute_ns, key](pb::SessionReply& reply) {
        absl::MutexLock lock(&pending->mu);
        pending->answered = true;
        if (reply.code() != 0) {
          connection->sent_graphs().Forget(key);
          return absl::OkStatus();  // the reply's own error is what the caller sees.
        }
        pb::ComputeReply& r = *reply.mutable_compute();
        compute_ns->fetch_add(static_cast<int64_t>(r.compute_us() * 1e3));
        if (static_cast<size_t>(r.outputs_size()) != pending->ranges.size()) {
          return absl::InternalError(absl::StrCat("rpc-server ", connection->endpoint(),
                                                  ": compute returned ", r.outputs_size(),
                                                  " outputs, asked for ", pending->ranges.size()));
        }
        for (size_t i = 0; i < pending->ranges.size(); ++i) {
          pending->Deliver(i, r.outputs(i));
          connection->inline_outputs().Add(reply.id(), pending->ranges[i].buffer,
                                           pending->ranges[i].offset,
                                           std::move(*r.mutable_outputs(i)));
        }
        return absl::OkStatus();
      },
      &id));
  last_outputs_ = std::move(pending);
  last_compute_id_ = id;
  waited_here_ = false;
  return SendHeldPulls();
}

absl::Status RemoteStream::GetTensorAsync(const Tensor* t, void* data, size_t offset, size_t size) {
  TG_RETURN_IF_ERROR(SendHeld());
  Connection* connection = device_->connection();
  TG_ASSIGN_OR_RETURN(RemoteBuffer * buffer, BufferOn(*device_, *t));
  TG_RETURN_IF_ERROR(CheckTensorRange(*t, offset, size));
  if (size == 0) return absl::OkStatus();
  const uint64_t at = buffer->OffsetOf(*t, offset);
  // Right after its Compute (nothing sent or queued since), an output comes with the
  // Compute's reply, or came with it already.
  if (last_outputs_ != nullptr && last_compute_id_ == connection->last_sent_id() &&
      !connection->has_queued_writes_for(device_->index()) &&
      (last_outputs_->Attach(buffer->handle(), at, size, data) ||
       connection->inline_outputs().Read(buffer->handle(), at, data, size))) {
    return absl::OkStatus();
  }
  if (size > kInlineWriteBytes) return buffer->GetTensor(t, data, offset, size);  // a Download.
  return buffer->PostRead(at, data, size);
}

absl::Status RemoteStream::CopyTensorAsync(const Tensor* src, Tensor* dst) {
  auto* from = dynamic_cast<RemoteBuffer*>(src->buffer);
  auto* to = dynamic_cast<RemoteBuffer*>(dst->buffer);
  Connection* connection = device_->connection();
  if (from == nullptr || to == nullptr || to->connection() != connection) {
    return absl::UnimplementedError("async copy only between tensors of rpc-servers");
  }
  if (from->connection() == connection) {
    TG_RETURN_IF_ERROR(SendHeld());
    // The server runs it in order behind dst's device, and behind src's unless nothing of
    // this server was waited for (WaitEvent) since the last Compute: then the caller has
    // seen src's writers finish, and src's device need not pause for the copy.
    return to->PostCopy(*from, src, dst, /*src_ready=*/!waited_here_);
  }
  if (!OrdersPullsFrom(*from->connection())) {
    return absl::UnimplementedError("async copy between servers needs ordered peer pulls");
  }
  return PostOrderedPull(*from, src, dst);
}

bool RemoteStream::OrdersPullsFrom(const Connection& source) const {
  return source.orders_pulls() && device_->connection()->orders_pulls();
}

absl::Status RemoteStream::PostOrderedPull(RemoteBuffer& from, const Tensor* src, Tensor* dst) {
  const size_t bytes = src->NumBytes();
  if (bytes != dst->NumBytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("remote copy: ", bytes, " bytes into ", dst->NumBytes()));
  }
  TG_RETURN_IF_ERROR(CheckTensorRange(*src, 0, bytes));
  TG_RETURN_IF_ERROR(CheckTensorRange(*dst, 0, bytes));
  auto* to = static_cast<RemoteBuffer*>(dst->buffer);
  Connection* source = from.connection();
  // The command the pull waits for at the source may still be held here: send it.
  TG_RETURN_IF_ERROR(source->Flush());
  TG_ASSIGN_OR_RETURN(std::string grant, source->PeerReadGrant(from.handle()));
  pb::SessionRequest request;
  pb::PeerPull* p = request.mutable_peer_pull();
  p->set_endpoint(source->endpoint());
  p->set_grant(std::move(grant));
  p->set_src_offset(from.OffsetOf(*src));
  p->set_size(bytes);
  p->set_dst_buffer(to->handle());
  p->set_dst_offset(to->OffsetOf(*dst));
  auto waited = waited_.find(source);
  p->set_after(waited == waited_.end() ? 0 : waited->second);
  if (!pulls_held_) {
    device_->connection()->BeginBatch();
    pulls_held_ = true;
  }
  return device_->connection()->Post(std::move(request));
}

absl::Status RemoteStream::PushTensorAsync(const Tensor* src, Stream* to, Tensor* dst) {
  auto* destination = dynamic_cast<RemoteStream*>(to);
  auto* from = dynamic_cast<RemoteBuffer*>(src->buffer);
  auto* into = dst == nullptr ? nullptr : dynamic_cast<RemoteBuffer*>(dst->buffer);
  Connection* here = device_->connection();
  if (destination == nullptr || from == nullptr || into == nullptr || from->connection() != here ||
      into->connection() != destination->device_->connection() || into->connection() == here) {
    return absl::UnimplementedError("pushes go from one rpc-server to another");
  }
  Connection* there = into->connection();
  const size_t bytes = src->NumBytes();
  if (!here->pushes() || !there->pushes() || bytes > kMaxPushBytes) {
    return absl::UnimplementedError(
        "push needs protocol minor 5 on both servers and a small tensor");
  }
  if (bytes != dst->NumBytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("remote push: ", bytes, " bytes into ", dst->NumBytes()));
  }
  TG_RETURN_IF_ERROR(CheckTensorRange(*src, 0, bytes));
  TG_RETURN_IF_ERROR(CheckTensorRange(*dst, 0, bytes));
  TG_ASSIGN_OR_RETURN(std::string grant, there->PeerReadGrant(into->handle()));
  // One held push goes to one server, in one message to the peer.
  if (!push_->empty() && (push_->destination != there || push_->bytes + bytes > kMaxPushBytes ||
                          push_->push.peer_push().pieces_size() >= kMaxPushPieces)) {
    TG_RETURN_IF_ERROR(push_->Send());
  }
  if (push_->empty()) {
    push_ = std::make_shared<HeldPush>();
    push_->source = here;
    push_->destination = there;
    push_->push.mutable_peer_push()->set_endpoint(there->endpoint());
  }
  const uint64_t tag = there->NextPushTag();
  pb::PushPiece* piece = push_->push.mutable_peer_push()->add_pieces();
  piece->set_buffer(from->handle());
  piece->set_offset(from->OffsetOf(*src));
  piece->set_size(bytes);
  piece->set_grant(std::move(grant));
  piece->set_tag(tag);
  push_->bytes += bytes;
  pb::AwaitPush* await = push_->awaits.emplace_back().mutable_await_push();
  await->set_endpoint(here->endpoint());
  await->set_tag(tag);
  await->set_dst_buffer(into->handle());
  await->set_dst_offset(into->OffsetOf(*dst));
  await->set_size(bytes);
  if (destination->pushed_here_.empty() || destination->pushed_here_.back() != push_) {
    destination->pushed_here_.push_back(push_);
  }
  return absl::OkStatus();
}

absl::Status RemoteStream::RecordEvent(Event* event) {
  TG_RETURN_IF_ERROR(SendHeld());
  auto* e = dynamic_cast<RemoteEvent*>(event);
  if (e == nullptr || e->connection() != device_->connection()) {
    return absl::InvalidArgumentError(
        absl::StrCat(device_->name(), ": the event belongs to another device"));
  }
  e->Record(device_->connection()->last_sent_id());
  return absl::OkStatus();
}

absl::Status RemoteStream::WaitEvent(Event* event) {
  TG_RETURN_IF_ERROR(SendHeld());
  auto* e = dynamic_cast<RemoteEvent*>(event);
  if (e == nullptr) return absl::UnimplementedError("waits only for events of rpc-servers");
  if (e->connection() == device_->connection()) {
    waited_here_ = true;  // the split's copies follow the source's work there.
    return absl::OkStatus();
  }
  // Another server's work reaches this one's memory only through a copy: an ordered pull
  // (CopyTensorAsync) waits for it at the source, a copy through the client reads it behind
  // it. So with ordered pulls on both sides nothing needs to wait here.
  if (OrdersPullsFrom(*e->connection())) {
    uint64_t& waited = waited_[e->connection()];
    waited = std::max(waited, e->id());
    return absl::OkStatus();
  }
  return e->Synchronize();
}

void RemoteStream::BeginBatch() {
  (void)SendHeld();  // an error stays on the connection for the next wait.
  device_->connection()->BeginBatch();
}

absl::Status RemoteStream::EndBatch() {
  TG_RETURN_IF_ERROR(SendHeld());
  return device_->connection()->EndBatch();
}

StreamStats RemoteStream::stats() const {
  StreamStats s;
  s.compute_us = compute_ns_->load() / 1e3;
  s.splits = splits_.load();
  return s;
}

}  // namespace tg::rpc
