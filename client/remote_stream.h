// An execution queue on a remote device. Compute sends the graph's key (the whole graph
// only the first time), posts without waiting and asks for the graph's small outputs inline,
// so a decode step costs one round trip per device. A server runs one session's commands in
// order, so work can be queued ahead of the replies: GetTensorAsync takes an output from
// the reply of the Compute it follows, and an event marks a point of the command stream.
#ifndef TENSORGRID_CLIENT_REMOTE_STREAM_H_
#define TENSORGRID_CLIENT_REMOTE_STREAM_H_

#include <atomic>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "client/connection.h"
#include "core/backend.h"

namespace tg::rpc {

class RemoteBuffer;
class RemoteDevice;

// A point in one connection's command stream: it has happened when the reply of the last
// command sent before RecordEvent has been read.
class RemoteEvent : public Event {
 public:
  explicit RemoteEvent(Connection* connection) : connection_(connection) {}
  absl::Status Synchronize() override;

  Connection* connection() const { return connection_; }
  void Record(uint64_t id) { id_ = id; }
  uint64_t id() const { return id_; }

 private:
  Connection* connection_;
  uint64_t id_ = 0;  // 0: nothing recorded, nothing to wait for.
};

class RemoteStream : public Stream {
 public:
  explicit RemoteStream(RemoteDevice* device);
  ~RemoteStream() override;

  Device* device() const override;
  absl::Status Synchronize() override;
  absl::Status Compute(Graph& graph) override;
  // `data` is filled when an event recorded after this call has happened (or at
  // Synchronize); it must stay valid until then.
  absl::Status GetTensorAsync(const Tensor* t, void* data, size_t offset, size_t size) override;
  // Between two tensors of the same server (the server copies; in order behind src's device
  // only when this stream waited for an event of the server since its last Compute, since
  // without a wait the caller has seen src's writers finish), or from another server that,
  // like this one, orders peer pulls (protocol minor 2): a PeerPull posted at once that
  // waits at the source for the source's command this stream last waited for (WaitEvent;
  // PeerPull.after), so neither the client nor this server waits for the source's reply.
  // Consecutive pulls go in one message and run at the same time there. Otherwise
  // UNIMPLEMENTED (the caller copies through the host).
  absl::Status CopyTensorAsync(const Tensor* src, Tensor* dst) override;
  // From this server to another, both of protocol minor 5: a PeerPush that this server runs
  // in its command order (after the work posted here so far) and an AwaitPush on `to`'s
  // server, in its command order, that waits for the bytes there. The pushes of one layer
  // boundary are held and go as one PeerPush (one peer call), their awaits in one message
  // with `to`'s next Compute; any command of either stream sends them first. Otherwise, or
  // for a tensor over kMaxPushBytes, UNIMPLEMENTED (the caller pulls). The held pieces are
  // shared by the two streams: use both from one thread (the scheduler's sequential run).
  absl::Status PushTensorAsync(const Tensor* src, Stream* to, Tensor* dst) override;
  absl::Status RecordEvent(Event* event) override;
  // Free for an event of the same server (its commands run in order) and for one of a
  // server both order pulls with (the copies carry the order); otherwise the host waits.
  absl::Status WaitEvent(Event* event) override;
  // Commands in between go to the server as one message (SessionChannel::BeginBatch).
  void BeginBatch() override;
  absl::Status EndBatch() override;
  StreamStats stats() const override;

 private:
  struct PendingOutputs;
  struct HeldPush;

  bool OrdersPullsFrom(const Connection& source) const;
  absl::Status PostOrderedPull(RemoteBuffer& from, const Tensor* src, Tensor* dst);
  // Consecutive ordered pulls are held in one batch, which the server runs at the same time;
  // anything else this stream does sends them first.
  absl::Status SendHeldPulls();
  // Sends the pushes this stream holds as a source and those held for it as a destination.
  absl::Status SendHeldPushes();
  // Everything held: pushes, then pulls.
  absl::Status SendHeld();

  RemoteDevice* device_;
  // Server-side time; written by reply handlers, which run on whichever thread drains.
  std::shared_ptr<std::atomic<int64_t>> compute_ns_;
  std::atomic<int64_t> splits_{0};
  // The outputs the last Compute asked for inline, and its request id.
  std::shared_ptr<PendingOutputs> last_outputs_;
  uint64_t last_compute_id_ = 0;
  bool pulls_held_ = false;  // a batch of this stream's pulls is open on the connection.
  // Per other server: the latest command of its that this stream waited for (WaitEvent);
  // a pull from it waits there for that command (PeerPull.after). Without a wait, the
  // caller has synchronized the source itself and the pull need not wait.
  absl::flat_hash_map<const Connection*, uint64_t> waited_;
  // This stream waited for an event of its own server since its last Compute (WaitEvent):
  // a copy from another device of the server follows that device's work there.
  bool waited_here_ = false;
  // The pieces this stream pushes, held until one of the two streams does anything else;
  // shared with the destination's stream, which sends them before its own commands.
  std::shared_ptr<HeldPush> push_;
  std::vector<std::shared_ptr<HeldPush>> pushed_here_;  // other streams' pushes into this one.
};

// Tensors up to this size are pushed between servers (PushTensorAsync); larger ones, which a
// message to the peer would carry whole, are pulled in chunks.
inline constexpr size_t kMaxPushBytes = size_t{1} << 20;
// Pieces held in one push at most: what rpc-server takes in one (PeerPushes::kMaxPieces).
inline constexpr int kMaxPushPieces = 64;

// Outputs up to this many bytes in total come back with the Compute reply.
inline constexpr size_t kInlineOutputBytes = size_t{1} << 20;

}  // namespace tg::rpc

#endif  // TENSORGRID_CLIENT_REMOTE_STREAM_H_
