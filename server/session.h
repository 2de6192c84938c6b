// Session: everything one client connection owns on rpc-server and the implementation of
// every Session-stream command, independent of gRPC so that tests and the fuzzer drive it
// directly. Destroying a session frees all it holds. It composes three parts:
//   HandleTable (server/handle_table.h): its buffers behind opaque handles, the model files
//     it opened, and the charge of all it holds against its memory limit, the server's
//     budget and the buffer cap;
//   GraphCache (server/graph_cache.h): its decoded graphs, charged to the table;
//   CommandDispatch (server/command_dispatch.h): runs each request's commands in order, the
//     device work on per-device lanes, and holds the peer grants and device streams.
// Session itself bounds the requests queued, answers in request order (server/
// reply_sequencer.h), and ends: Cancel() (the client went away, or SessionEnv::abandoned
// says so: asked before a command at most every abandoned_poll_interval) answers every
// command not yet started CANCELLED, so a batch stops within one command once it is known;
// Close() also ends the Upload/Download streams working on the session's buffers
// (AddStream) and frees every buffer, even one a stream still names: streams hold buffers
// weakly (SessionBuffer), so the memory returns when the session ends, not when its slowest
// client gives up.
// Bounds: a batch holds at most kMaxBatchCommands commands; decoded graphs are charged to
// the session's memory (ReserveMemory) and the cache holds at most rpc::kGraphCacheGraphs
// of them, of rpc::kGraphCacheTensors tensors in all; queued requests hold at most
// kMaxQueuedRequestBytes (Post waits for room).
// Thread-safety: thread-safe. Post/Refuse/Handle/Serve are serialized by the dispatch;
// FindBuffer(), ModelFile(), the memory charge and the byte counters may be used
// concurrently from Upload/Download threads.
#ifndef TENSORGRID_SERVER_SESSION_H_
#define TENSORGRID_SERVER_SESSION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/backend.h"
#include "server/client_accounts.h"
#include "server/command_dispatch.h"
#include "server/command_progress.h"
#include "server/graph_cache.h"
#include "server/handle_table.h"
#include "server/memory_reservation.h"
#include "server/reply_sequencer.h"
#include "server/session_buffer.h"
#include "server/stream_deadline.h"
#include "tensorgrid/v1/tensorgrid.pb.h"

namespace tg::server {

// What a session needs from the server; everything but `devices` may be null/0.
struct SessionEnv {
  std::vector<Device*> devices;  // index = AllocBuffer.device / Compute.device.
  uint64_t mem_limit = 0;        // bytes per session; 0 = no limit.
  // The server-wide budget every reservation is charged against too; none without it.
  ServerMemoryBudget* budget = nullptr;
  // The account of the client that opened the session (server/client_accounts.h), charged
  // too; none without it. The session keeps it, and the client's session count, until it is
  // destroyed.
  std::shared_ptr<ClientAccount> client;
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
  // Asked at most this often: gRPC's answer polls the call's completion queue (a futex wait
  // of tens of microseconds on a VM), and a decode step under -sm tensor dispatches dozens of
  // commands. Zero asks before every command.
  absl::Duration abandoned_poll_interval = absl::Milliseconds(1);
};

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
  void Post(std::shared_ptr<const tensorgrid::v1::SessionRequest> request, ReplySequencer* replies);
  // Answers request `id` with `status` (a request refused before it was parsed, such as one
  // over the wire limits of the service), in order with the replies posted before it.
  void Refuse(uint64_t id, const absl::Status& status, ReplySequencer* replies);
  // Blocks until every command posted so far has finished.
  void Quiesce();
  // From now on every command not yet started is answered CANCELLED without running
  // (commands running finish). Thread-safe; idempotent.
  void Cancel();
  // True after Cancel, or once SessionEnv::abandoned said so.
  bool cancelled() const;
  // Ends the session: Cancel, waits for the commands in flight, cancels the streams added
  // with AddStream (they end CANCELLED), and frees every buffer, graph and grant. Called by
  // the service when the Session stream ends (and by the destructor). Idempotent.
  void Close() ABSL_LOCKS_EXCLUDED(streams_mu_);
  // A stream working on this session's buffers, cancelled by Close (held weakly). False,
  // with nothing added, when the session is closed already.
  bool AddStream(std::weak_ptr<CancellableStream> stream) ABSL_LOCKS_EXCLUDED(streams_mu_);
  // Runs one command and waits for it. Errors come back in the reply (code + message); the
  // session stays usable after any error. A batch is refused here (INVALID_ARGUMENT).
  tensorgrid::v1::SessionReply Handle(const tensorgrid::v1::SessionRequest& request);
  // Post, then waits until the request's reply messages have gone to `send`. Returns false
  // as soon as `send` does (the stream is gone).
  bool Serve(const tensorgrid::v1::SessionRequest& request,
             absl::FunctionRef<bool(const tensorgrid::v1::SessionReply&)> send);

  // The buffer behind a handle, kept alive while the caller holds it; NOT_FOUND otherwise.
  absl::StatusOr<std::shared_ptr<SessionBuffer>> FindBuffer(uint64_t handle) const {
    return table_.Find(handle);
  }

  // How far this session's commands have finished (for PeerCopy's `after`); the
  // ReplySequencer of its stream must advance it.
  CommandProgress* progress() const { return progress_.get(); }
  // The index file id behind a handle from OpenModelFile; NOT_FOUND for a handle this
  // session was not given.
  absl::StatusOr<uint64_t> ModelFile(uint64_t handle) const { return table_.ModelFile(handle); }

  // Charges `size` bytes of whatever this session makes the server hold (buffers, decoded
  // graphs, queued commands, mailbox pieces, stream buffers) against its memory limit and
  // the server's budget (SessionEnv::budget): RESOURCE_EXHAUSTED naming the numbers and the
  // flag when it would pass either. The bytes go back when the reservation is dropped,
  // unless committed (then whoever holds the memory gives them back with ReleaseMemory;
  // what is still held when the session ends goes back to the budget then). Thread-safe.
  absl::StatusOr<MemoryReservation> ReserveMemory(uint64_t size) {
    return table_.ReserveMemory(size);
  }
  void ReleaseMemory(uint64_t size) { table_.ReleaseMemory(size); }

  void AddUploadedBytes(uint64_t n) { counters_.uploaded += n; }
  void AddCacheHitBytes(uint64_t n) { counters_.cache_hit += n; }
  void AddModelFileBytes(uint64_t n) { counters_.model_file += n; }
  uint64_t bytes_held() const { return table_.bytes_held(); }
  size_t buffer_count() const { return table_.buffer_count(); }

 private:
  // Waits until the requests queued leave room for `bytes` more (or none is queued, or the
  // session is cancelled), then counts them; Dequeued gives them back.
  void WaitForQueueRoom(uint64_t bytes) ABSL_LOCKS_EXCLUDED(queue_mu_);
  void Dequeued(uint64_t bytes) ABSL_LOCKS_EXCLUDED(queue_mu_);

  const std::string id_;
  const SessionEnv env_;

  // Set by Cancel, or by cancelled() once SessionEnv::abandoned says so.
  mutable std::atomic<bool> cancelled_{false};
  // When cancelled() may next ask SessionEnv::abandoned (steady clock, nanoseconds).
  mutable std::atomic<int64_t> next_abandoned_poll_ns_{0};
  absl::Mutex streams_mu_;
  bool closed_ ABSL_GUARDED_BY(streams_mu_) = false;
  std::vector<std::weak_ptr<CancellableStream>> streams_in_flight_ ABSL_GUARDED_BY(streams_mu_);
  absl::Mutex queue_mu_;
  uint64_t queued_bytes_ ABSL_GUARDED_BY(queue_mu_) = 0;

  TransferCounters counters_;
  // Shared with the buffers (SessionBuffer::progress), which peers may hold past the session.
  const std::shared_ptr<CommandProgress> progress_;
  HandleTable table_;
  GraphCache graphs_;  // charged to table_.
  // Last: its lanes stop before the table and graphs their work uses go.
  CommandDispatch dispatch_;
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_SESSION_H_
