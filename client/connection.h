// Connection: one client's link to one rpc-server: the Hello handshake, the ordered Session
// stream (commands may be posted without waiting; errors surface at the next wait), bulk
// Upload/Download streams, and the output bytes a Compute returned inline. Thread-safe.
#ifndef TENSORGRID_CLIENT_CONNECTION_H_
#define TENSORGRID_CLIENT_CONNECTION_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/upload_pool.h"
#include "tensorgrid/v1/tensorgrid.grpc.pb.h"

namespace tg::rpc {

// How to reach and authenticate to rpc-servers (tools' --rpc-token-file, --rpc-tls-*).
struct ClientOptions {
  std::string token;         // bearer token; empty = none.
  std::string tls_ca_pem;    // trust these roots (TLS on); empty = plaintext.
  std::string tls_cert_pem;  // client certificate for servers that require mTLS.
  std::string tls_key_pem;
  int upload_streams = 4;  // parallel Upload streams.
  bool progress = true;    // a progress line on stderr while uploading (terminals only).
};

// True when [offset, offset + size) lies inside [outer_offset, outer_offset + outer_size)
// (no overflow for any values).
inline bool RangeInside(uint64_t offset, uint64_t size, uint64_t outer_offset,
                        uint64_t outer_size) {
  return offset >= outer_offset && size <= outer_size && offset - outer_offset <= outer_size - size;
}

class Connection {
 public:
  using Reply = tensorgrid::v1::SessionReply;
  using Request = tensorgrid::v1::SessionRequest;
  using ReplyHandler = std::function<absl::Status(Reply&)>;  // may move data out.

  // Connects, checks protocol version and op table (FAILED_PRECONDITION on a mismatch) and
  // opens the session. UNAVAILABLE names the endpoint when the server cannot be reached.
  static absl::StatusOr<std::unique_ptr<Connection>> Open(const std::string& endpoint,
                                                          const ClientOptions& options);
  ~Connection();

  const std::string& endpoint() const { return endpoint_; }
  const tensorgrid::v1::HelloReply& hello() const { return hello_; }

  // Sends a command and waits for its reply (and for everything posted before it). A reply
  // with an error code becomes that status, with the endpoint in the message.
  absl::StatusOr<Reply> Call(Request request);
  // Sends a command without waiting; `on_reply` (optional) sees its reply later, error
  // replies included (it must not call back into this Connection except the *Inline*,
  // *Graph* methods). An error reply is returned by the next Call/Drain/WaitFor. `id`
  // (optional) receives the command's request id.
  absl::Status Post(Request request, ReplyHandler on_reply = nullptr, uint64_t* id = nullptr);
  // Waits for every posted command.
  absl::Status Drain();
  // Waits for the commands sent up to request `id` only: later ones stay in flight, and
  // queued writes stay queued. Returns an error reply among them, like Drain.
  absl::Status WaitFor(uint64_t id);
  // The request id of the last command posted (0: none yet), and whether QueueWrite holds
  // writes that go out after it.
  uint64_t last_sent_id() const;
  bool has_queued_writes() const;
  // Commands posted between BeginBatch and EndBatch are held and sent together as one Batch
  // message, so that the server reads one message and writes one (or a few) for a burst of
  // decode steps instead of one each. Anything that waits for a held command sends the batch
  // first, and a full batch (kMaxBatchCommands or kMaxBatchBytes) goes out at once. Nests;
  // per connection: commands other threads post meanwhile join the batch.
  void BeginBatch();
  absl::Status EndBatch();
  static constexpr int kMaxBatchCommands = 64;
  static constexpr size_t kMaxBatchBytes = size_t{4} << 20;

  // A small write that rides along with the next command: inside the next Compute (one
  // message per decode step), or posted just before any other command.
  absl::Status QueueWrite(uint64_t buffer, uint64_t offset, const void* data, size_t size);
  static constexpr size_t kMaxQueuedWriteBytes = size_t{1} << 20;

  // Writes bytes into a buffer range through the upload pool (parallel streams); `cacheable`
  // sends their SHA-256 so a server that has them answers without receiving them.
  // Returns at once; WaitUploads (called by every session command) waits for completion.
  absl::Status Upload(uint64_t buffer, uint64_t offset, const void* data, size_t size,
                      bool cacheable);
  absl::Status WaitUploads();
  // Reads a range over a Download stream.
  absl::Status Download(uint64_t buffer, uint64_t offset, void* data, size_t size);

  // Output bytes returned inline by the last Compute(s), valid until the next command that
  // may write (the Connection drops them itself when it sends one). True when
  // [offset, offset+size) of `buffer` was among them (copied into data).
  bool ReadInlineOutput(uint64_t buffer, uint64_t offset, void* data, size_t size);
  void AddInlineOutput(uint64_t buffer, uint64_t offset, std::string bytes);

  // True when the server holds the graph of `key` (sent recently); otherwise records that it
  // is being sent now. The server keeps more graphs than this remembers, so a key-only
  // Compute never misses.
  bool MarkGraphSent(uint64_t key);
  void ForgetGraph(uint64_t key);  // the server refused it: send it whole next time.
  static constexpr size_t kRememberedGraphs = 16;

  // A grant for another server to read `buffer` (PeerCopy); cached per buffer.
  absl::StatusOr<std::string> PeerReadGrant(uint64_t buffer);
  void ForgetBuffer(uint64_t buffer);

 private:
  Connection(std::string endpoint, ClientOptions options);
  absl::Status Start();
  // Sends (or, in a batch and when may_batch, holds) a command after the queued writes;
  // returns its request id.
  absl::StatusOr<uint64_t> SendLocked(Request request, bool may_batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ReadOneLocked(Reply* reply) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status DrainLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads one reply message and handles the pending commands it answers (one, or several
  // when it is a BatchReply).
  absl::Status HandleReplyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status HandleOneReplyLocked(Reply& reply) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The first error reply not yet returned, when its command's id is <= up_to (a BatchReply
  // may answer commands beyond the one a WaitFor is for: their errors wait for their turn).
  absl::Status TakeDeferredErrorLocked(uint64_t up_to = UINT64_MAX)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives the command the next id and writes it, or holds it in the batch; a command written
  // on its own sends the held batch first, so the order stays.
  absl::StatusOr<uint64_t> WriteLocked(Request request, bool may_batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SendBatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status FlushWritesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status BrokenLocked(absl::string_view what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ReplyStatus(const Reply& reply) const;
  void AddAuth(grpc::ClientContext* context) const;
  absl::StatusOr<UploadResult> UploadOne(const UploadJob& job);
  void ClearInlineOutputs();

  const std::string endpoint_;
  const ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<tensorgrid::v1::TensorGrid::Stub> stub_;
  tensorgrid::v1::HelloReply hello_;
  std::string session_id_;

  mutable absl::Mutex mu_;
  std::unique_ptr<grpc::ClientContext> session_context_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<grpc::ClientReaderWriter<Request, Reply>> session_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  struct Pending {
    uint64_t id;
    ReplyHandler on_reply;
  };
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);  // sent or held, oldest first.
  int batch_depth_ ABSL_GUARDED_BY(mu_) = 0;
  Request batch_ ABSL_GUARDED_BY(mu_);  // the held commands (batch_.batch().commands()).
  size_t batch_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status deferred_error_ ABSL_GUARDED_BY(mu_);
  uint64_t deferred_error_id_ ABSL_GUARDED_BY(mu_) = 0;  // the command it answered.
  std::vector<tensorgrid::v1::WriteRange> queued_writes_ ABSL_GUARDED_BY(mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  struct InlineOutput {
    uint64_t buffer, offset;
    std::string bytes;
  };
  // Own lock: reply handlers file outputs while mu_ is held by the draining thread.
  mutable absl::Mutex outputs_mu_;
  std::vector<InlineOutput> inline_outputs_ ABSL_GUARDED_BY(outputs_mu_);
  std::deque<uint64_t> sent_graphs_ ABSL_GUARDED_BY(outputs_mu_);  // most recent last.
  absl::flat_hash_map<uint64_t, std::string> grants_ ABSL_GUARDED_BY(mu_);

  std::unique_ptr<UploadPool> uploads_;
};

}  // namespace tg::rpc

#endif  // TENSORGRID_CLIENT_CONNECTION_H_
