// Session: everything one client connection owns on rpc-server (buffers behind opaque
// handles, decoded graphs, per-device streams, peer grants) and the implementation of every
// Session-stream command, independent of gRPC so that tests and the fuzzer drive it
// directly. Destroying a session frees all it holds.
// Commands are checked, their handles looked up and their graphs decoded in request order on
// the calling thread; the work on device memory then runs on the lane of the device it
// touches (server/device_lanes.h: one thread per device, a copy between two devices on
// both), so that devices compute at the same time while each device's commands, and any two
// commands sharing a buffer, keep their order. A session whose buffers are all on one device
// runs everything on the calling thread, as a one-lane session would, without the hand-off.
// Replies leave in request order (server/reply_sequencer.h).
// Ending: Cancel() (the client went away, or SessionEnv::abandoned says so) answers every
// command not yet started CANCELLED, so a batch stops within one command; Close() also ends
// the Upload/Download streams working on the session's buffers (AddStream) and frees every
// buffer, even one a stream still names: streams hold buffers weakly (SessionBuffer), so the
// memory returns when the session ends, not when its slowest client gives up.
// Bounds: a batch holds at most kMaxBatchCommands commands; decoded graphs are charged to
// the session's memory (ReserveMemory) and the cache holds at most kMaxGraphCacheBytes of
// them; queued requests hold at most kMaxQueuedRequestBytes (Post waits for room).
// Thread-safety: Post/Handle/Serve calls are serialized by handle_mu_, which guards the
// handle-side state (graph cache, grants, lane mode); lane tasks touch only what they
// captured (shared buffers and graphs, their own reply), the stream of their own device
// (streams_[d] is used by one lane at a time, or by the calling thread before lanes start)
// and thread-safe counters. FindBuffer() and the byte counters may be used concurrently
// from Upload/Download threads.
#ifndef TENSORGRID_SERVER_SESSION_H_
#define TENSORGRID_SERVER_SESSION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/backend.h"
#include "server/command_progress.h"
#include "server/device_lanes.h"
#include "server/graph_decoder.h"
#include "server/memory_reservation.h"
#include "server/reply_sequencer.h"
#include "server/session_buffer.h"
#include "server/stream_deadline.h"
#include "tensorgrid/v1/tensorgrid.pb.h"

namespace tg::server {

class BlobCache;
class CollectiveRunner;
class GrantTable;
class MailboxAccount;
class Metrics;
class ModelIndex;
class PeerClient;
class PeerPushes;
class SessionBufferRecycler;

// Buffers one session may hold at most, by default (--max-buffers-per-session): far above
// what a model needs (a few per layer and device), and a bound on the bookkeeping that
// zero-byte buffers would otherwise grow without charge.
inline constexpr uint64_t kDefaultMaxBuffersPerSession = 65536;
// What every buffer is charged at least, whatever its size: its bookkeeping (the
// SessionBuffer, the backend's buffer object and its smallest allocation, the handle table
// slot), about 470 bytes resident per buffer measured on a CPU device
// (tests/hostile/memory_test.py --case zero_byte_buffers).
inline constexpr uint64_t kMinBufferCharge = 512;

// What a session needs from the server; everything but `devices` may be null/0.
struct SessionEnv {
  std::vector<Device*> devices;  // index = AllocBuffer.device / Compute.device.
  uint64_t mem_limit = 0;        // bytes per session; 0 = no limit.
  // The server-wide budget every reservation is charged against too; none without it.
  ServerMemoryBudget* budget = nullptr;
  // Buffers the session may hold at once (--max-buffers-per-session); 0 = no cap.
  uint64_t max_buffers = kDefaultMaxBuffersPerSession;
  Metrics* metrics = nullptr;
  GrantTable* grants = nullptr;             // GrantPeerRead is UNIMPLEMENTED without it.
  PeerClient* peers = nullptr;              // PeerPull is UNIMPLEMENTED without it.
  ModelIndex* models = nullptr;             // --model-dir; OpenModelFile is NOT_FOUND without it.
  const BlobCache* cache = nullptr;         // --cache; CacheStats says 0 blobs without it.
  CollectiveRunner* collectives = nullptr;  // AllReduce is UNIMPLEMENTED without it.
  // Keeps freed large host buffers for the next session's load; none kept without it.
  std::shared_ptr<SessionBufferRecycler> recycler;
  // PeerPush (which needs `peers` too) and AwaitPush are UNIMPLEMENTED without it.
  PeerPushes* pushes = nullptr;
  // Tests and the fuzzer only: handles are 1, 2, 3, ... so that scripted command sequences
  // can name them. A server never sets this.
  bool predictable_handles = false;
  // Polled between commands (may be empty): true once the client has gone (its Session
  // stream cancelled), and the session then cancels the rest of its work (Cancel).
  std::function<bool()> abandoned;
};

// Consecutive PeerPulls of a batch run at the same time, this many at most (one thread each):
// a layer boundary between servers is a few pulls per decode step.
inline constexpr int kMaxPullsAtOnce = 8;
// Decoded graphs kept per session (least recently used dropped first).
inline constexpr size_t kGraphCacheSize = 32;
// Bytes of decoded graphs kept per session (an estimate, DecodedGraphBytes; also charged to
// the session's memory): a 70B model's graph is a few MB decoded, so this keeps every
// device's graphs of a few models with room to spare.
inline constexpr uint64_t kMaxGraphCacheBytes = uint64_t{256} << 20;
// Commands in one Batch: a batch is checked and queued whole, so its size bounds the work a
// client can queue in one message (the client sends 64 at most; send several batches).
inline constexpr int kMaxBatchCommands = 4096;
// OK when a batch of `commands` is within kMaxBatchCommands; INVALID_ARGUMENT naming both
// and the fix otherwise (Post, and the scan of the wire bytes before any parse).
absl::Status CheckBatchSize(uint64_t commands);
// Bytes of requests posted and not yet finished (their messages) per session: Post waits
// for room beyond it, so a client that sends faster than its devices run holds the reading
// thread, not ever more memory. One request alone may be larger (up to the message limit).
inline constexpr uint64_t kMaxQueuedRequestBytes = uint64_t{128} << 20;

class Session {
 public:
  Session(std::string id, SessionEnv env);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const std::string& id() const { return id_; }
  // The id's first characters, for log lines: enough to tell sessions apart, not the whole
  // id, which (with the bearer token) is what Upload and Download accept as the session.
  std::string log_id() const;

  // Starts a request as it came off the Session stream, one command or a batch of them in
  // order, and returns once its commands are checked and queued: each reply goes to
  // `replies` when its command and every earlier one have finished (a batch's replies in
  // BatchReply messages of consecutive replies, each up to kMaxBatchReplyBytes unless one
  // reply alone is larger). `replies` must outlive the commands (see Quiesce).
  void Post(std::shared_ptr<const tensorgrid::v1::SessionRequest> request, ReplySequencer* replies)
      ABSL_LOCKS_EXCLUDED(handle_mu_);
  // Answers request `id` with `status` (a request refused before it was parsed, such as one
  // over the wire limits of the service), in order with the replies posted before it.
  void Refuse(uint64_t id, const absl::Status& status, ReplySequencer* replies)
      ABSL_LOCKS_EXCLUDED(handle_mu_);
  // Blocks until every command posted so far has finished.
  void Quiesce() ABSL_LOCKS_EXCLUDED(handle_mu_);
  // From now on every command not yet started is answered CANCELLED without running
  // (commands running finish). Thread-safe; idempotent.
  void Cancel();
  // True after Cancel, or once SessionEnv::abandoned said so.
  bool cancelled() const;
  // Ends the session: Cancel, waits for the commands in flight, cancels the streams added
  // with AddStream (they end CANCELLED), and frees every buffer, graph and grant. Called by
  // the service when the Session stream ends (and by the destructor). Idempotent.
  void Close() ABSL_LOCKS_EXCLUDED(handle_mu_, table_mu_, streams_mu_);
  // A stream working on this session's buffers, cancelled by Close (held weakly). False,
  // with nothing added, when the session is closed already.
  bool AddStream(std::weak_ptr<CancellableStream> stream) ABSL_LOCKS_EXCLUDED(streams_mu_);
  // Runs one command and waits for it. Errors come back in the reply (code + message); the
  // session stays usable after any error. A batch is refused here (INVALID_ARGUMENT).
  tensorgrid::v1::SessionReply Handle(const tensorgrid::v1::SessionRequest& request)
      ABSL_LOCKS_EXCLUDED(handle_mu_);
  // Post, then waits until the request's reply messages have gone to `send`. Returns false
  // as soon as `send` does (the stream is gone).
  bool Serve(const tensorgrid::v1::SessionRequest& request,
             absl::FunctionRef<bool(const tensorgrid::v1::SessionReply&)> send)
      ABSL_LOCKS_EXCLUDED(handle_mu_);

  // The buffer behind a handle, kept alive while the caller holds it; NOT_FOUND otherwise.
  absl::StatusOr<std::shared_ptr<SessionBuffer>> FindBuffer(uint64_t handle) const
      ABSL_LOCKS_EXCLUDED(table_mu_);

  // How far this session's commands have finished (for PeerCopy's `after`); the
  // ReplySequencer of its stream must advance it.
  CommandProgress* progress() const { return progress_.get(); }
  // The index file id behind a handle from OpenModelFile; NOT_FOUND for a handle this
  // session was not given.
  absl::StatusOr<uint64_t> ModelFile(uint64_t handle) const ABSL_LOCKS_EXCLUDED(table_mu_);

  // Charges `size` bytes of whatever this session makes the server hold (buffers, decoded
  // graphs, queued commands, mailbox pieces, stream buffers) against its memory limit and
  // the server's budget (SessionEnv::budget): RESOURCE_EXHAUSTED naming the numbers and the
  // flag when it would pass either. The bytes go back when the reservation is dropped,
  // unless committed (then whoever holds the memory gives them back with ReleaseMemory;
  // what is still held when the session ends goes back to the budget then). Thread-safe.
  absl::StatusOr<MemoryReservation> ReserveMemory(uint64_t size);
  void ReleaseMemory(uint64_t size);

  void AddUploadedBytes(uint64_t n) { uploaded_bytes_ += n; }
  void AddCacheHitBytes(uint64_t n) { cache_hit_bytes_ += n; }
  void AddModelFileBytes(uint64_t n) { model_file_bytes_ += n; }
  uint64_t bytes_held() const { return bytes_held_.load(); }
  size_t buffer_count() const ABSL_LOCKS_EXCLUDED(table_mu_);

 private:
  struct CachedGraph {
    uint32_t device;
    uint64_t key;
    // The graph's estimated bytes (charge->size()), charged to the session while the graph
    // lives; set before the graph is decoded.
    std::optional<MemoryReservation> charge;
    std::unique_ptr<DecodedGraph> graph;
    // What the graph points into, kept alive while a queued Compute holds the graph.
    std::vector<std::shared_ptr<SessionBuffer>> buffers;
  };
  // The part of a command that touches device memory, and the lanes it runs on; a command
  // done by its checks alone has no lanes.
  struct Work {
    std::vector<int> lanes;
    absl::AnyInvocable<absl::Status(tensorgrid::v1::SessionReply*)> run;
  };

  // Checks one command, queues its work and files its reply in slot i of `group`.
  void Dispatch(std::shared_ptr<const tensorgrid::v1::SessionRequest> message,
                const tensorgrid::v1::SessionRequest& command, ReplySequencer* replies,
                ReplySequencer::Group* group, int i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(handle_mu_);
  // How many commands of a batch from `first` on are PeerPulls into disjoint bytes (at most
  // kMaxPullsAtOnce): they run at the same time (DispatchPulls).
  int PullRun(const tensorgrid::v1::SessionRequest& batch, int first) const;
  // Dispatch for commands [first, first + n) of a batch that PullRun grouped.
  void DispatchPulls(std::shared_ptr<const tensorgrid::v1::SessionRequest> message, int first,
                     int n, ReplySequencer* replies, ReplySequencer::Group* group)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(handle_mu_);
  // Turns a command's status into its reply (code, message, metrics).
  void Finish(const tensorgrid::v1::SessionRequest& command, const absl::Status& status,
              tensorgrid::v1::SessionReply* reply) const;
  // The checks of a command, in order; what touches device memory comes back as Work.
  absl::StatusOr<Work> Prepare(const tensorgrid::v1::SessionRequest& request,
                               tensorgrid::v1::SessionReply* reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(handle_mu_);
  // Work on the lane of `buf`'s device.
  Work OnLaneOf(const SessionBuffer& buf,
                absl::AnyInvocable<absl::Status(tensorgrid::v1::SessionReply*)> run) const;
  absl::Status Alloc(const tensorgrid::v1::AllocBuffer& cmd,
                     tensorgrid::v1::AllocBufferReply* reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(handle_mu_);
  absl::Status Free(uint64_t handle) ABSL_EXCLUSIVE_LOCKS_REQUIRED(handle_mu_);
  // A PeerPush: its pieces read on their buffers' lanes, then delivered.
  absl::StatusOr<Work> PreparePush(const tensorgrid::v1::PeerPush& cmd)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(handle_mu_);
  absl::StatusOr<Work> PrepareCompute(const tensorgrid::v1::Compute& cmd)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(handle_mu_);
  // The cached graph a Compute names, or the one it carries, decoded and cached.
  absl::StatusOr<std::shared_ptr<CachedGraph>> GraphFor(const tensorgrid::v1::Compute& cmd)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(handle_mu_);
  // A Compute's work, on its device's lane: inputs written, graph run, outputs read.
  absl::Status RunCompute(const tensorgrid::v1::Compute& cmd, DecodedGraph& graph,
                          const std::vector<std::shared_ptr<SessionBuffer>>& inputs,
                          const std::vector<std::shared_ptr<SessionBuffer>>& outputs,
                          tensorgrid::v1::ComputeReply* reply);
  absl::Status Grant(uint64_t handle, tensorgrid::v1::GrantPeerReadReply* reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(handle_mu_);
  absl::Status OpenModelFile(const tensorgrid::v1::OpenModelFile& cmd,
                             tensorgrid::v1::OpenModelFileReply* reply)
      ABSL_LOCKS_EXCLUDED(table_mu_);
  absl::StatusOr<Device*> DeviceAt(uint32_t index) const;
  // Runs on device's lane (or the calling thread before lanes start).
  absl::StatusOr<Stream*> StreamFor(uint32_t device);
  uint64_t NextHandle() ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_mu_);
  // Drops the least recently used cached graphs until `more` bytes fit in
  // kMaxGraphCacheBytes.
  void EvictGraphs(uint64_t more) ABSL_EXCLUSIVE_LOCKS_REQUIRED(handle_mu_);
  // Waits until the requests queued leave room for `bytes` more (or none is queued, or the
  // session is cancelled), then counts them; Dequeued gives them back.
  void WaitForQueueRoom(uint64_t bytes) ABSL_LOCKS_EXCLUDED(queue_mu_);
  void Dequeued(uint64_t bytes) ABSL_LOCKS_EXCLUDED(queue_mu_);

  const std::string id_;
  const SessionEnv env_;
  const uint64_t handle_key_;   // random: handles of different sessions differ.
  const uint64_t handle_mult_;  // random odd multiplier.

  // lane_of_[d]: the lane of device index d (indices naming the same Device share one).
  const std::vector<int> lane_of_;

  absl::Mutex handle_mu_;  // serializes Post().
  std::list<std::shared_ptr<CachedGraph>> graphs_ ABSL_GUARDED_BY(handle_mu_);  // front: newest.
  absl::flat_hash_map<uint64_t, std::string> grants_ ABSL_GUARDED_BY(handle_mu_);
  // What peers deliver for this session's grants is charged to (made with the first grant;
  // closed with the session, after its grants are revoked and their pieces dropped).
  std::shared_ptr<MailboxAccount> mailbox_ ABSL_GUARDED_BY(handle_mu_);
  // The lane of the first buffer allocated; once a buffer is on another, lanes_ runs the work.
  int first_lane_ ABSL_GUARDED_BY(handle_mu_) = -1;
  bool parallel_ ABSL_GUARDED_BY(handle_mu_) = false;
  // streams_[d]: device d's stream, created on first use by whoever runs d's work then.
  std::vector<std::unique_ptr<Stream>> streams_;

  mutable absl::Mutex table_mu_;
  uint64_t next_handle_ ABSL_GUARDED_BY(table_mu_) = 1;
  absl::flat_hash_map<uint64_t, std::shared_ptr<SessionBuffer>> buffers_ ABSL_GUARDED_BY(table_mu_);
  absl::flat_hash_set<uint64_t> model_files_ ABSL_GUARDED_BY(table_mu_);  // opened index ids.

  // Set by Cancel, or by cancelled() once SessionEnv::abandoned says so.
  mutable std::atomic<bool> cancelled_{false};
  absl::Mutex streams_mu_;
  bool closed_ ABSL_GUARDED_BY(streams_mu_) = false;
  std::vector<std::weak_ptr<CancellableStream>> streams_in_flight_ ABSL_GUARDED_BY(streams_mu_);
  absl::Mutex queue_mu_;
  uint64_t queued_bytes_ ABSL_GUARDED_BY(queue_mu_) = 0;

  std::atomic<uint64_t> bytes_held_{0};
  std::atomic<uint64_t> uploaded_bytes_{0};
  std::atomic<uint64_t> cache_hit_bytes_{0};
  std::atomic<uint64_t> model_file_bytes_{0};

  // Shared with the buffers (SessionBuffer::progress), which peers may hold past the session.
  const std::shared_ptr<CommandProgress> progress_;
  DeviceLanes lanes_;  // last: its threads stop before the state their work uses goes.
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_SESSION_H_
