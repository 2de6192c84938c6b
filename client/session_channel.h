// SessionChannel: one client's ordered Session stream to one rpc-server. Commands get
// increasing request ids and may be posted without waiting; the server runs them in order
// and answers in order, and the replies are read when someone waits (Call, Drain, WaitFor).
// An error reply is kept until a wait at or after its command returns it. Commands posted
// between BeginBatch and EndBatch go out together as one Batch message, and small writes
// queued with QueueWrite ride along with the next command. After a transport failure the
// channel is broken: every later call returns the same status. No read or write of the stream
// waits longer than CallDeadlines::ForCommands of the bytes in flight: past it a watchdog
// cancels the stream and the channel is broken with DEADLINE_EXCEEDED ("stalled"). Thread-safe:
// one lock guards the writes and everything that must change in step with the stream; the
// replies are read by one waiting thread at a time with the lock released, so that other
// threads post (and the other waiters wait) meanwhile: two devices of one server, each
// driven by its own thread, are not held to one another's replies.
#ifndef TENSORGRID_CLIENT_SESSION_CHANNEL_H_
#define TENSORGRID_CLIENT_SESSION_CHANNEL_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "client/call_deadlines.h"
#include "client/queued_writes.h"
#include "client/stall_watchdog.h"
#include "tensorgrid/v1/tensorgrid.grpc.pb.h"

namespace tg::rpc {

class SessionChannel {
 public:
  using Reply = tensorgrid::v1::SessionReply;
  using Request = tensorgrid::v1::SessionRequest;
  using ReplyHandler = std::function<absl::Status(Reply&)>;  // may move data out.

  // Commands held in one batch at most: a full batch goes out at once.
  static constexpr int kMaxBatchCommands = 64;
  // Bytes of commands held in one batch at most (a command larger than this goes alone).
  static constexpr size_t kMaxBatchBytes = size_t{4} << 20;
  // Commands posted and not yet answered at most; one more waits for all of them, since the
  // server's send window for unread replies is finite (not inside a batch: its end sends
  // it, and the caller's next wait reads the replies).
  static constexpr size_t kMaxPendingReplies = 256;

  // Opens the Session stream on `stub` under `context` (which carries the auth metadata)
  // and reads the server's Started reply. Errors name `endpoint`. `deadlines` (which must
  // outlive the channel) bounds every wait; null: a default CallDeadlines of its own.
  static absl::StatusOr<std::unique_ptr<SessionChannel>> Open(
      tensorgrid::v1::TensorGrid::Stub& stub, std::unique_ptr<grpc::ClientContext> context,
      std::string endpoint, const CallDeadlines* deadlines = nullptr);
  // Waits for the posted commands, then closes the stream.
  ~SessionChannel();

  const std::string& session_id() const { return session_id_; }

  // Sends a command and waits for its reply (and for everything posted before it). A reply
  // with an error code becomes that status, with the endpoint in the message; an error of an
  // earlier posted command wins. `id` (optional) receives the command's request id, which is
  // set once it is sent even when the call fails.
  absl::StatusOr<Reply> Call(Request request, uint64_t* id = nullptr) ABSL_LOCKS_EXCLUDED(mu_);
  // Sends (or, in a batch, holds) a command without waiting; `on_reply` (optional) sees its
  // reply later, error replies included, on whichever thread reads it and with this
  // channel's lock held (it must not call back into this channel). An error reply is
  // returned by the next wait that reaches it. `id` (optional) receives the request id.
  absl::Status Post(Request request, ReplyHandler on_reply = nullptr, uint64_t* id = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Waits for every posted command (sending the held batch and the queued writes first).
  absl::Status Drain() ABSL_LOCKS_EXCLUDED(mu_);
  // Sends the held batch and the queued writes without waiting for any reply, so that every
  // command up to last_sent_id() is on its way (another server may wait there for one).
  absl::Status Flush() ABSL_LOCKS_EXCLUDED(mu_);
  // Drain when commands are in flight or writes queued; otherwise only returns the broken
  // state (an error kept for a later command stays kept).
  absl::Status DrainIfBusy() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits for the commands up to request `id` only: later ones stay in flight (or held),
  // and queued writes stay queued. Returns an error reply among them, like Drain; an error
  // of a later command that came in the same BatchReply waits for its own turn.
  absl::Status WaitFor(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);

  // The request id of the last command sent or held (0: none yet).
  uint64_t last_sent_id() const ABSL_LOCKS_EXCLUDED(mu_);
  // Messages written to the stream so far (a batch is one).
  uint64_t messages_sent() const ABSL_LOCKS_EXCLUDED(mu_);

  // Commands posted between BeginBatch and EndBatch are held and sent together as one Batch
  // message, so that the server reads one message and writes one (or a few) for a burst of
  // decode steps instead of one each. Anything that waits for a held command sends the batch
  // first, and a full batch (kMaxBatchCommands or kMaxBatchBytes) goes out at once. Nests;
  // per channel: commands other threads post meanwhile join the batch.
  void BeginBatch() ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status EndBatch() ABSL_LOCKS_EXCLUDED(mu_);

  // A small write that rides along with the next command: inside the next Compute of its
  // device (the server's device whose memory `buffer` is), or posted just before any other
  // command. When QueuedWrites::kMaxBytes would be passed, the queued writes are posted first.
  absl::Status QueueWrite(uint32_t device, uint64_t buffer, uint64_t offset, const void* data,
                          size_t size) ABSL_LOCKS_EXCLUDED(mu_);
  bool has_queued_writes() const ABSL_LOCKS_EXCLUDED(mu_);
  bool has_queued_writes_for(uint32_t device) const ABSL_LOCKS_EXCLUDED(mu_);
  size_t queued_write_bytes() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Stream = grpc::ClientReaderWriter<Request, Reply>;
  struct Pending {
    uint64_t id;
    ReplyHandler on_reply;
  };

  SessionChannel(std::unique_ptr<grpc::ClientContext> context, std::string endpoint,
                 const CallDeadlines* deadlines);

  // Sends (or, in a batch and when may_batch, holds) a command after the queued writes;
  // returns its request id.
  absl::StatusOr<uint64_t> SendLocked(Request request, bool may_batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives the command the next id and writes it, or holds it in the batch; a command written
  // on its own sends the held batch first, so the order stays.
  absl::StatusOr<uint64_t> WriteLocked(Request request, bool may_batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SendBatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Posts the queued writes as Write commands.
  absl::Status FlushWritesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads one message with mu_ released (reading_ set meanwhile; the caller made sure no
  // other thread reads), under the read watchdog; a failed read breaks the channel.
  absl::Status ReadLocked(Reply* reply) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // stream_->Write under the watchdog; counts the message's bytes (and those it asks back)
  // as in flight.
  bool WriteStreamLocked(const Request& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status DrainLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WaitForLocked(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads one reply message (ReadLocked) and handles the pending commands it answers (one,
  // or several when it is a BatchReply). When another thread is reading, waits for it to
  // handle its message instead: the caller looks again.
  absl::Status HandleReplyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status HandleOneReplyLocked(Reply& reply) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The first error reply not yet returned, when its command's id is <= up_to.
  absl::Status TakeDeferredErrorLocked(uint64_t up_to = UINT64_MAX)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks the channel broken by a failed read or write (the stream's final status says why,
  // or a watchdog when it cancelled the stream). Waits for a read in progress to end first:
  // the stream's Finish may not run beside a Read.
  absl::Status BrokenLocked(absl::string_view what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks the channel broken by a reply that does not answer the command it should.
  absl::Status OutOfOrderLocked(uint64_t got, absl::string_view want)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ReplyStatus(const Reply& reply) const;
  // For mu_.Await: no thread is reading.
  bool NotReading() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !reading_; }

  const std::string endpoint_;
  std::string session_id_;                        // set by Open.
  std::unique_ptr<CallDeadlines> own_deadlines_;  // when Open was given none.
  const CallDeadlines* const deadlines_;

  mutable absl::Mutex mu_;
  const std::unique_ptr<grpc::ClientContext> context_;  // outlives stream_.
  std::unique_ptr<Stream> stream_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t messages_sent_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);  // sent or held, oldest first.
  bool reading_ ABSL_GUARDED_BY(mu_) = false;         // a thread is in stream_->Read, unlocked.
  int batch_depth_ ABSL_GUARDED_BY(mu_) = 0;
  Request batch_ ABSL_GUARDED_BY(mu_);  // the held commands (batch_.batch().commands()).
  size_t batch_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status deferred_error_ ABSL_GUARDED_BY(mu_);
  uint64_t deferred_error_id_ ABSL_GUARDED_BY(mu_) = 0;  // the command it answered.
  QueuedWrites queued_ ABSL_GUARDED_BY(mu_);
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  // Request bytes sent and reply bytes asked for since no command was pending.
  size_t in_flight_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // The limit a watchdog enforced when it cancelled the stream; zero: none did.
  absl::Duration stalled_after_ ABSL_GUARDED_BY(mu_);
  // Last: their threads cancel context_, and they stop first. A read and a write may be in
  // progress at once, each under its own.
  StallWatchdog read_watchdog_;
  StallWatchdog write_watchdog_;
};

}  // namespace tg::rpc

#endif  // TENSORGRID_CLIENT_SESSION_CHANNEL_H_
