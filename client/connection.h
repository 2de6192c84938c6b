// Connection: one client's link to one rpc-server: the Hello handshake, the ordered Session
// stream (SessionChannel: commands may be posted without waiting; errors surface at the next
// wait), bulk Upload/Download streams, and the small per-server caches: output bytes a
// Compute returned inline, graphs the server has, peer-read grants. Thread-safe: it holds no
// lock of its own; each part guards its own state.
#ifndef TENSORGRID_CLIENT_CONNECTION_H_
#define TENSORGRID_CLIENT_CONNECTION_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/call_deadlines.h"
#include "client/inline_outputs.h"
#include "client/peer_grants.h"
#include "client/sent_graphs.h"
#include "client/session_channel.h"
#include "client/upload_pool.h"
#include "proto/model_identity.h"
#include "proto/protocol.h"
#include "tensorgrid/v1/tensorgrid.grpc.pb.h"

namespace tg::rpc {

// How to reach and authenticate to rpc-servers (tools' --rpc-token-file, --rpc-tls-*).
struct ClientOptions {
  std::string token;         // bearer token; empty = none.
  std::string tls_ca_pem;    // trust these roots (TLS on); empty = plaintext.
  std::string tls_cert_pem;  // client certificate for servers that require mTLS.
  std::string tls_key_pem;
  int upload_streams = 4;  // parallel Upload streams.
  bool progress = true;    // a progress line on stderr while loading a model (terminals only).
  DeadlineAllowances deadlines;  // how long any call may wait (CallDeadlines).
};

class Connection {
 public:
  using Reply = SessionChannel::Reply;
  using Request = SessionChannel::Request;
  using ReplyHandler = SessionChannel::ReplyHandler;

  // Connects, checks protocol version and op table (FAILED_PRECONDITION on a mismatch) and
  // opens the session. UNAVAILABLE names the endpoint when the server cannot be reached.
  static absl::StatusOr<std::unique_ptr<Connection>> Open(const std::string& endpoint,
                                                          const ClientOptions& options);
  ~Connection();

  const std::string& endpoint() const { return endpoint_; }
  const tensorgrid::v1::HelloReply& hello() const { return hello_; }
  // Whether weight hashes can save bytes on this server: its cache (--cache), or a server
  // older than rpc::kMinorModelFiles, which does not say and may have one.
  bool MayHaveCache() const {
    return hello_.protocol_minor() < rpc::kMinorModelFiles || hello_.has_cache();
  }
  // Whether OpenModelFile may find the client's file (--model-dir, protocol minor 3).
  bool HasModelDir() const {
    return hello_.protocol_minor() >= rpc::kMinorModelFiles && hello_.has_model_dir();
  }
  // Whether the server hashes and stores bytes sent without a hash (UploadHeader.store):
  // a cache, and protocol minor 6.
  bool StoresUnhashed() const {
    return hello_.protocol_minor() >= rpc::kMinorStoreUnhashed && hello_.has_cache();
  }
  // Whether a hashed upload header carries the proof that the client holds the bytes
  // (UploadHeader.cache_proof): to every server with a cache. From protocol minor 9 on a
  // cache hit needs it; an older server ignores the field (it is additive), and sending it
  // costs one hash pass over bytes the client holds anyway.
  bool ProvesCache() const { return hello_.has_cache(); }
  int upload_streams() const { return options_.upload_streams; }

  // The session commands (SessionChannel's rules), after the uploads in flight: Call sends
  // a command and waits for its reply and everything before it; Post sends without waiting
  // (a reply handler may use the caches below, nothing else of this Connection); Drain waits
  // for every posted command; WaitFor only for those up to request `id`.
  absl::StatusOr<Reply> Call(Request request);
  absl::Status Post(Request request, ReplyHandler on_reply = nullptr, uint64_t* id = nullptr);
  absl::Status Drain();
  absl::Status WaitFor(uint64_t id) { return session_->WaitFor(id); }
  // Waits for the uploads in flight, then sends the held batch and queued writes without
  // waiting for replies (SessionChannel::Flush): every command up to last_sent_id() is sent.
  absl::Status Flush();
  // True when the server orders peer pulls (PeerPull.after, protocol minor 2).
  bool orders_pulls() const;
  // True when the server pushes to and awaits pushes from peers (PeerPush, AwaitPush,
  // protocol minor 5).
  bool pushes() const { return hello_.protocol_minor() >= kMinorPush; }
  // A new tag for a piece pushed to this server (AwaitPush.tag): unique in its session.
  uint64_t NextPushTag() { return ++push_tags_; }
  uint64_t last_sent_id() const { return session_->last_sent_id(); }
  // Session messages written so far (a batch is one).
  uint64_t messages_sent() const { return session_->messages_sent(); }
  bool has_queued_writes_for(uint32_t device) const {
    return session_->has_queued_writes_for(device);
  }
  // Commands in between go to the server as one Batch message (SessionChannel::BeginBatch).
  void BeginBatch() { session_->BeginBatch(); }
  absl::Status EndBatch() { return session_->EndBatch(); }

  // A small write that rides along with the next command (SessionChannel::QueueWrite).
  absl::Status QueueWrite(uint32_t device, uint64_t buffer, uint64_t offset, const void* data,
                          size_t size);

  // Writes bytes into a buffer range through the upload pool (parallel streams), after the
  // commands posted before; `cacheable` sends their SHA-256 so a server that has them
  // answers without receiving them. Returns at once; WaitUploads (called by every session
  // command) waits for completion.
  absl::Status Upload(uint64_t buffer, uint64_t offset, const void* data, size_t size,
                      bool cacheable);
  // Queues a prepared job (borrowed bytes of a model file, a known digest, a model-file
  // piece) after the commands posted before. Returns at once.
  absl::Status QueueUpload(UploadJob job);
  absl::Status WaitUploads();
  // Offers jobs whose digest is known to the server in one FillPieces call (at most
  // kMaxFillPieces; protocol minor 8, else UNIMPLEMENTED): it fills each it has from its
  // cache or its copy of the model file, as an Upload would. Returns, per job, whether it
  // did; those are done (on_done has run, upload_stats() counts them), the others still need
  // QueueUpload. After the commands posted before, as QueueUpload.
  absl::StatusOr<std::vector<bool>> FillPieces(absl::Span<const UploadJob* const> jobs);
  // The upload pool's current burst.
  UploadStats upload_stats() const { return uploads_->stats(); }
  // Asks the server for its own copy of a model file (OpenModelFile): NOT_FOUND when it has
  // none, PERMISSION_DENIED for a name outside its --model-dir.
  absl::StatusOr<tensorgrid::v1::OpenModelFileReply> OpenModelFile(absl::string_view name,
                                                                   const ModelIdentity& identity);
  // How many blobs the server's cache holds now (CacheStats; 0 without a cache).
  absl::StatusOr<uint64_t> CacheBlobs();
  // Reads a range over a Download stream.
  absl::Status Download(uint64_t buffer, uint64_t offset, void* data, size_t size);

  // The link speed measured on this connection and the deadlines it gives.
  const CallDeadlines& deadlines() const { return deadlines_; }

  // Output bytes returned inline by Computes; commands sent through this Connection mark
  // them stale themselves.
  InlineOutputs& inline_outputs() { return inline_outputs_; }
  // Graphs the server has (a Compute of one sends only its key).
  SentGraphs& sent_graphs() { return sent_graphs_; }

  // A grant for another server to read `buffer` (PeerCopy); cached per buffer.
  absl::StatusOr<std::string> PeerReadGrant(uint64_t buffer);
  // True when PeerReadGrant(buffer) answers from the cache, without a round trip.
  bool HasPeerReadGrant(uint64_t buffer) const { return grants_.Find(buffer).has_value(); }
  // The buffer is being freed: its grant and inline outputs go.
  void ForgetBuffer(uint64_t buffer);

 private:
  Connection(std::string endpoint, ClientOptions options);
  absl::Status Start();
  absl::Status Hello();
  void AddAuth(grpc::ClientContext* context) const;
  // One job; sent again with the bytes' own digest when a given one was wrong.
  absl::StatusOr<UploadResult> UploadOne(const UploadJob& job);
  // One Upload stream; `digest` (when set) goes in the header.
  absl::StatusOr<UploadResult> UploadOnce(const UploadJob& job,
                                          const std::optional<Sha256Digest>& digest);

  const std::string endpoint_;
  const ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<tensorgrid::v1::TensorGrid::Stub> stub_;
  std::unique_ptr<grpc::internal::RpcMethod> upload_method_;  // Upload on raw byte buffers.
  tensorgrid::v1::HelloReply hello_;
  CallDeadlines deadlines_;  // session_ and the uploads use it: goes after them.
  InlineOutputs inline_outputs_;
  SentGraphs sent_graphs_;
  PeerGrants grants_;
  std::atomic<uint64_t> push_tags_{0};
  std::unique_ptr<SessionChannel> session_;  // its reply handlers use the caches: goes first.
  std::unique_ptr<UploadPool> uploads_;      // its threads use stub_ and session_: goes first.
};

}  // namespace tg::rpc

#endif  // TENSORGRID_CLIENT_CONNECTION_H_
