#include "server/service.h"

#include <grpcpp/support/proto_buffer_reader.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/op.h"
#include "core/shape_rules.h"
#include "core/status_macros.h"
#include "proto/protocol.h"
#include "proto/upload_frame.h"
#include "server/auth_policy.h"
#include "server/blob_cache.h"
#include "server/log.h"
#include "server/memory_reservation.h"
#include "server/metrics.h"
#include "server/piece_region.h"
#include "server/random_id.h"
#include "server/reply_sequencer.h"
#include "server/request_precheck.h"
#include "server/upload_sink.h"

namespace tg::server {
namespace {

namespace pb = ::tensorgrid::v1;

// The index of Session among the service's methods (the proto's order; Upload's is
// rpc::kUploadMethodIndex).
constexpr int kSessionMethodIndex = 1;

// Freed weight buffers are kept (for the next load of the same model) up to this share of
// the host's memory; the kept memory is given back at once when an allocation needs room.
constexpr uint64_t kRecycleShareOfHostMemory = 4;

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()),
                      PeerClient::IdentityDetails(s));  // a lost peer, for the server calling.
}

grpc::Status Error(grpc::StatusCode code, std::string message) {
  return grpc::Status(code, std::move(message));
}

// Ops for which `device` accepts a representative node (f32 sources of a small shape).
std::vector<uint32_t> SupportedOps(Device* device) {
  std::vector<uint32_t> ops;
  Tensor srcs[kMaxSrc];
  for (Tensor& s : srcs) {
    s.ne[0] = 32;
    s.ne[1] = 4;
    SetContiguousStrides(&s);
  }
  for (uint32_t op = 1; op < static_cast<uint32_t>(Op::kCount); ++op) {
    Tensor node;
    node.op = static_cast<Op>(op);
    node.ne[0] = 32;
    node.ne[1] = 4;
    SetContiguousStrides(&node);
    // The required sources only: an optional one may select a variant a device lacks (a
    // SOFT_MAX with sinks on CUDA) without the op's common form being unsupported there.
    const Arity arity = OpArity(node.op);
    for (int i = 0; i < arity.required; ++i) node.src[i] = &srcs[i];
    if (device->SupportsOp(node)) ops.push_back(op);
  }
  return ops;
}

// The peer client's options: the servers of a cluster share one token, which this server
// sends on its peer calls.
PeerClientOptions WithToken(PeerClientOptions peer, const std::string& token) {
  peer.auth_token = token;
  return peer;
}

}  // namespace

TensorGridService::TensorGridService(ServiceOptions options)
    : options_(std::move(options)),
      server_id_(RandomHex(16)),
      auth_(options_.auth_token, options_.peer.allowed, options_.client_tokens),
      clients_(options_.client_mem_limit, options_.client_max_sessions),
      recycler_(
          std::make_shared<SessionBufferRecycler>(HostMemoryTotal() / kRecycleShareOfHostMemory)),
      peers_(WithToken(options_.peer, options_.auth_token)),
      links_(&grants_, options_.peer.allowed, options_.metrics),
      collectives_(&peers_, &grants_, options_.metrics, &pushes_,  // sender keys, for Run.
                   &links_),
      pushes_(&peers_, &grants_, options_.metrics, PeerPushes::kPieceWait, collectives_.mailbox()),
      watchdog_(options_.stream_idle_timeout) {
  for (Device* d : options_.devices) supported_ops_.push_back(SupportedOps(d));
  // gRPC owns method handlers and takes them as raw pointers.
  MarkMethodStreamed(kSessionMethodIndex,
                     new grpc::internal::BidiStreamingHandler<TensorGridService, grpc::ByteBuffer,
                                                              pb::SessionReply>(
                         [](TensorGridService* service, grpc::ServerContext* context,
                            grpc::ServerReaderWriter<pb::SessionReply, grpc::ByteBuffer>* stream) {
                           return service->SessionRaw(context, stream);
                         },
                         this));
  MarkMethodCallback(
      rpc::kUploadMethodIndex,
      new grpc::internal::CallbackBidiHandler<grpc::ByteBuffer, pb::UploadReply>(
          [this](grpc::CallbackServerContext* context) { return UploadReactor(context); }));
}

TensorGridService::~TensorGridService() = default;

size_t TensorGridService::active_sessions() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

std::shared_ptr<server::Session> TensorGridService::FindSession(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second;
}

grpc::Status TensorGridService::Hello(grpc::ServerContext* context, const pb::HelloRequest* request,
                                      pb::HelloReply* reply) {
  if (grpc::Status s = auth_.Check(*context, "Hello"); !s.ok()) return s;
  const uint64_t fingerprint = OpTableFingerprint();
  if (request->protocol_version() != rpc::kProtocolVersion ||
      request->op_table_fingerprint() != fingerprint) {
    kServerLog.Warn(
        "client refused: protocol mismatch",
        {{"peer", PeerAddress(*context)},
         {"client_version", request->protocol_version()},
         {"client_op_table", absl::Hex(request->op_table_fingerprint(), absl::kZeroPad16)},
         {"version", rpc::kProtocolVersion},
         {"op_table", absl::Hex(fingerprint, absl::kZeroPad16)}});
    return Error(grpc::StatusCode::FAILED_PRECONDITION,
                 absl::StrFormat("protocol mismatch: client speaks version %d with op table "
                                 "%016x, server speaks version %d with op table %016x",
                                 request->protocol_version(), request->op_table_fingerprint(),
                                 rpc::kProtocolVersion, fingerprint));
  }
  reply->set_protocol_version(rpc::kProtocolVersion);
  reply->set_op_table_fingerprint(fingerprint);
  reply->set_server_id(server_id_);
  reply->set_max_message_bytes(rpc::kMaxMessageBytes);
  reply->set_max_inline_bytes(rpc::kMaxInlineBytes);
  reply->set_protocol_minor(rpc::kProtocolMinor);
  reply->set_has_cache(options_.cache != nullptr);
  reply->set_has_model_dir(options_.models != nullptr);
  for (size_t i = 0; i < options_.devices.size(); ++i) {
    Device* d = options_.devices[i];
    pb::DeviceInfo* info = reply->add_devices();
    info->set_index(static_cast<uint32_t>(i));
    info->set_name(std::string(d->name()));
    info->set_description(std::string(d->description()));
    info->set_type(std::string(DeviceTypeName(d->type())));
    // A CPU device's memory is what this process may use: its container's limit where that
    // is less than the host's (core/host_memory.h).
    const DeviceMemory mem = d->memory();
    BufferType* bt = d->default_buffer_type();
    // Memory kept for reuse is free to the next session (a client splits layers by it).
    uint64_t free = std::min<uint64_t>(mem.total, mem.free + recycler_->kept_bytes(bt));
    // Nor can sessions take more than what the server budget has left.
    if (const ServerMemoryBudget* budget = options_.budget;
        budget != nullptr && budget->limit() != 0) {
      free = std::min(free, budget->limit() - std::min(budget->limit(), budget->held()));
    }
    info->set_memory_free(free);
    info->set_memory_total(mem.total);
    pb::BufferTypeInfo* bti = info->mutable_buffer_type();
    bti->set_name(std::string(bt->name()));
    bti->set_alignment(bt->alignment());
    bti->set_max_size(bt->max_size());
    bti->set_is_host(bt->is_host());
    for (uint32_t op : supported_ops_[i]) info->add_supported_ops(op);
  }
  return grpc::Status::OK;
}

grpc::Status TensorGridService::SessionRaw(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<pb::SessionReply, grpc::ByteBuffer>* stream) {
  if (grpc::Status s = auth_.Check(*context, "Session"); !s.ok()) return s;
  const std::string client = auth_.ClientOf(*context);
  absl::StatusOr<std::shared_ptr<ClientAccount>> account = clients_.Open(client);
  if (!account.ok()) {
    kServerLog.Warn("session refused", {{"peer", PeerAddress(*context)},
                                        {"client", client},
                                        {"error", account.status().message()}});
    return Error(grpc::StatusCode::RESOURCE_EXHAUSTED, std::string(account.status().message()));
  }
  const std::string id = RandomHex(16);
  SessionEnv env;
  env.devices = options_.devices;
  env.mem_limit = options_.session_mem_limit;
  env.budget = options_.budget;
  env.client = *std::move(account);
  env.max_buffers = options_.max_buffers_per_session;
  env.metrics = options_.metrics;
  env.grants = &grants_;
  env.peers = &peers_;
  env.models = options_.models;
  env.cache = options_.cache;
  env.collectives = &collectives_;
  env.recycler = recycler_;
  env.pushes = &pushes_;
  // A client that cancels its stream stops its work within a millisecond and one command (a
  // batch too). The session asks this only until it is closed, below, before the context goes.
  env.abandoned = [context] { return context->IsCancelled(); };
  auto session = std::make_shared<server::Session>(id, std::move(env));
  size_t open_sessions;
  {
    absl::MutexLock lock(&mu_);
    open_sessions = sessions_.size();
    if (open_sessions < static_cast<size_t>(options_.max_sessions)) sessions_[id] = session;
  }
  if (open_sessions >= static_cast<size_t>(options_.max_sessions)) {
    kServerLog.Warn("session refused: server full", {{"peer", PeerAddress(*context)},
                                                     {"sessions", open_sessions},
                                                     {"max_sessions", options_.max_sessions}});
    session->Close();  // before the context its hook asks goes.
    // The numbers also as trailing metadata (rpc::kServerFullSessionsKey), for clients.
    context->AddTrailingMetadata(rpc::kServerFullSessionsKey, absl::StrCat(open_sessions));
    context->AddTrailingMetadata(rpc::kServerFullMaxSessionsKey,
                                 absl::StrCat(options_.max_sessions));
    return Error(grpc::StatusCode::RESOURCE_EXHAUSTED,
                 absl::StrFormat("server full: %d sessions open (--max-sessions %d)", open_sessions,
                                 options_.max_sessions));
  }
  kServerLog.Info("session opened", {{"id", session->log_id()},
                                     {"peer", PeerAddress(*context)},
                                     {"client", client},
                                     {"sessions", open_sessions + 1}});
  if (options_.metrics != nullptr) options_.metrics->SessionOpened();
  pb::SessionReply started;
  started.set_id(0);
  started.mutable_started()->set_session_id(id);
  grpc::Status result = grpc::Status::OK;
  if (stream->Write(started)) {
    // Replies leave from whichever thread finishes a command (the session's device lanes),
    // in request order, while this thread reads on: gRPC allows one Read beside one Write.
    ReplySequencer replies([stream](const pb::SessionReply& r) { return stream->Write(r); },
                           session->progress());
    grpc::ByteBuffer raw;
    while (replies.ok() && stream->Read(&raw)) {
      // Counts over the limits are refused before the parse would cost memory for them.
      grpc::ProtoBufferReader reader(&raw);
      const Precheck check = PrecheckSessionRequest(&reader);
      if (!check.status.ok()) {
        session->Refuse(check.id, check.status, &replies);
        continue;
      }
      auto request = std::make_shared<pb::SessionRequest>();
      if (!grpc::SerializationTraits<pb::SessionRequest>::Deserialize(&raw, request.get()).ok()) {
        result = Error(grpc::StatusCode::INVALID_ARGUMENT,
                       "session: a message that is not a SessionRequest");
        break;
      }
      session->Post(std::move(request), &replies);
    }
    // A client gone mid-batch: what is queued is answered CANCELLED, not run.
    if (context->IsCancelled() || !result.ok()) session->Cancel();
    session->Quiesce();  // nothing may write to the stream once this handler returns.
    replies.WaitSent();
  }
  // What the session held when its stream ended, for the log line.
  const size_t buffers_held = session->buffer_count();
  const uint64_t bytes_held = session->bytes_held();
  // Frees every buffer now and cancels the session's Uploads and Downloads, which hold the
  // buffers weakly: nothing of the session outlives its stream.
  session->Close();
  collectives_.EndSession(id);
  {
    absl::MutexLock lock(&mu_);
    sessions_.erase(id);
    open_sessions = sessions_.size();
  }
  kServerLog.Info("session closed", {{"id", session->log_id()},
                                     {"buffers", buffers_held},
                                     {"bytes_held", bytes_held},
                                     {"sessions", open_sessions}});
  session.reset();
  if (options_.metrics != nullptr) options_.metrics->SessionClosed();
  return result;
}

namespace {

// A whole UploadMessage parsed by protobuf (the header, or a chunk encoded unusually).
bool ParseUploadMessage(grpc::ByteBuffer* raw, pb::UploadMessage* message) {
  return grpc::SerializationTraits<pb::UploadMessage>::Deserialize(raw, message).ok();
}

// The reply to an upload whose bytes the server had (UploadSink::have_it).
pb::UploadReply HaveItReply(const UploadSink& sink) {
  pb::UploadReply reply;
  reply.set_have_it(true);
  reply.set_source(sink.source());
  reply.set_received(sink.size());
  return reply;
}

// Counts an Upload or FillPieces call and keeps tg_upload_seconds_total running while it is open.
class UploadTimer {
 public:
  UploadTimer(Metrics* metrics, Metrics::UploadCall call) : metrics_(metrics) {
    if (metrics_ != nullptr) metrics_->UploadStarted(call);
  }
  ~UploadTimer() {
    if (metrics_ != nullptr) metrics_->UploadFinished();
  }
  UploadTimer(const UploadTimer&) = delete;
  UploadTimer& operator=(const UploadTimer&) = delete;

 private:
  Metrics* metrics_;
};

// A FillPieces request's pieces, before any is filled: no two write overlapping bytes of one
// buffer (a piece named 256 times in a 14 KB call made the server copy 4 GiB), and together
// they fill at most rpc::kMaxFillBytes. INVALID_ARGUMENT naming the piece otherwise.
grpc::Status CheckFillPieces(const pb::FillPiecesRequest& request) {
  struct Extent {
    uint64_t buffer, offset, end;
    int index;
  };
  std::vector<Extent> extents;
  extents.reserve(request.pieces_size());
  uint64_t total = 0;
  for (int i = 0; i < request.pieces_size(); ++i) {
    const pb::UploadHeader& piece = request.pieces(i);
    // A region costs the piece the server reads and spans its rows in the buffer.
    server::RegionExtent extent{piece.size(), piece.size()};
    if (piece.has_region()) {
      absl::StatusOr<server::RegionExtent> region = server::CheckPieceRegion(piece);
      if (!region.ok()) return ToGrpc(region.status());
      extent = *region;
    }
    if (extent.read > rpc::kMaxFillBytes - total) {
      return Error(grpc::StatusCode::INVALID_ARGUMENT,
                   absl::StrFormat("fill: piece %d of %d bytes takes the call past %d bytes, the "
                                   "most one FillPieces may fill; offer them in several calls",
                                   i, extent.read, rpc::kMaxFillBytes));
    }
    total += extent.read;
    if (extent.span == 0) continue;
    if (piece.offset() > UINT64_MAX - extent.span) {
      return Error(grpc::StatusCode::INVALID_ARGUMENT,
                   absl::StrFormat("fill: piece %d: offset %d + size %d overflows", i,
                                   piece.offset(), extent.span));
    }
    extents.push_back({piece.buffer(), piece.offset(), piece.offset() + extent.span, i});
  }
  std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) {
    return std::tie(a.buffer, a.offset, a.index) < std::tie(b.buffer, b.offset, b.index);
  });
  for (size_t k = 1; k < extents.size(); ++k) {
    const Extent& a = extents[k - 1];
    const Extent& b = extents[k];
    // Sorted by offset: when any two overlap, two neighbours do.
    if (a.buffer == b.buffer && b.offset < a.end) {
      const auto [first, second] = std::minmax(a.index, b.index);
      return Error(grpc::StatusCode::INVALID_ARGUMENT,
                   absl::StrFormat("fill: piece %d overlaps piece %d (buffer %d, bytes %d..%d); "
                                   "each byte may be named once per call",
                                   second, first, b.buffer, b.offset, std::min(a.end, b.end)));
    }
  }
  return grpc::Status::OK;
}

// One Upload stream on the callback API. It holds no thread while it waits: the header, each
// chunk and the client's end arrive as OnReadDone on a gRPC thread, which writes the chunk
// into the buffer there. The watchdog (idle) and the session (its end) may Cancel it at any
// time; mu_ serializes that with the callbacks, so that Finish happens once and nothing
// starts after it. Held by shared_ptr: gRPC's reference (self_) goes in OnDone, the
// watchdog's and session's are weak and pin it only while they call Cancel.
class UploadStream final : public grpc::ServerBidiReactor<grpc::ByteBuffer, pb::UploadReply>,
                           public CancellableStream,
                           public std::enable_shared_from_this<UploadStream> {
 public:
  using FindSessionFn = std::function<std::shared_ptr<Session>(const std::string&)>;

  UploadStream(FindSessionFn find, const ServiceOptions& options)
      : find_(std::move(find)),
        options_(options),
        timer_(options.metrics, Metrics::UploadCall::kUpload) {}

  // Starts reading the header; `watchdog` cancels the stream when it stays idle.
  void Start(StreamWatchdog& watchdog) {
    self_ = shared_from_this();
    watchdog.Watch(weak_from_this());
    absl::MutexLock lock(&mu_);
    StartRead(&raw_);
  }

  // Ends the stream with `status` (the client sees it) unless it has ended.
  void Cancel(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    FinishLocked(ToGrpc(status));
  }

 private:
  void OnReadDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    if (finished_) return;  // cancelled meanwhile: the read only reports the end.
    if (!ok) return EndLocked();
    Touch();
    const absl::Status s = sink_ == nullptr ? HeaderLocked() : ChunkLocked();
    if (!s.ok()) return FinishLocked(ToGrpc(s));
    if (!finished_) StartRead(&raw_);
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) return FinishLocked(Error(grpc::StatusCode::CANCELLED, "upload: client went away"));
    Touch();
    if (final_.has_value() && !finished_) {
      finished_ = true;
      StartWriteAndFinish(&*final_, grpc::WriteOptions(), grpc::Status::OK);
    }
  }

  void OnDone() override {
    std::shared_ptr<UploadStream> last = std::move(self_);  // may delete this on return.
  }

  // The first message: the header, checked and started (UploadSink::Start).
  absl::Status HeaderLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    pb::UploadMessage msg;
    if (!ParseUploadMessage(&raw_, &msg) || msg.part_case() != pb::UploadMessage::kHeader) {
      return absl::InvalidArgumentError("upload: the first message must be a header");
    }
    std::shared_ptr<Session> session = find_(msg.header().session_id());
    if (session == nullptr) return absl::NotFoundError("upload: no such session");
    TG_ASSIGN_OR_RETURN(sink_, UploadSink::Start(session, msg.header(), options_.cache,
                                                 options_.metrics, options_.models));
    if (sink_->have_it()) {
      finished_ = true;
      reply_ = HaveItReply(*sink_);
      StartWriteAndFinish(&reply_, grpc::WriteOptions(), grpc::Status::OK);
      return absl::OkStatus();
    }
    // The session's end cancels the stream (and has freed the buffer).
    if (!session->AddStream(weak_from_this())) {
      return absl::CancelledError("upload: the session ended");
    }
    reply_.set_send(true);
    writing_ = true;
    StartWrite(&reply_);
    return absl::OkStatus();
  }

  // A chunk, into the buffer.
  absl::Status ChunkLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (rpc::FindChunk(raw_, &slices_, &parts_)) return sink_->ReceiveChunk(parts_);
    pb::UploadMessage msg;
    if (ParseUploadMessage(&raw_, &msg)) return sink_->Receive(msg);
    return absl::InvalidArgumentError("upload: a message that is not an UploadMessage");
  }

  // The client finished sending (or went away): the byte count, or the error.
  void EndLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (sink_ == nullptr) {
      return FinishLocked(
          Error(grpc::StatusCode::INVALID_ARGUMENT, "upload: the first message must be a header"));
    }
    absl::StatusOr<uint64_t> received = sink_->Finish();
    if (!received.ok()) return FinishLocked(ToGrpc(received.status()));
    final_.emplace();
    final_->set_received(*received);
    if (writing_) return;  // OnWriteDone sends it after the `send` reply.
    finished_ = true;
    StartWriteAndFinish(&*final_, grpc::WriteOptions(), grpc::Status::OK);
  }

  void FinishLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(std::move(status));
  }

  const FindSessionFn find_;
  const ServiceOptions& options_;
  const UploadTimer timer_;
  std::shared_ptr<UploadStream> self_;  // gRPC's reference, until OnDone.
  absl::Mutex mu_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // Finish (or WriteAndFinish) was called.
  bool writing_ ABSL_GUARDED_BY(mu_) = false;   // the `send` reply is on its way.
  grpc::ByteBuffer raw_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<UploadSink> sink_ ABSL_GUARDED_BY(mu_);
  pb::UploadReply reply_ ABSL_GUARDED_BY(mu_);
  std::optional<pb::UploadReply> final_ ABSL_GUARDED_BY(mu_);
  std::vector<grpc::Slice> slices_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::string_view> parts_ ABSL_GUARDED_BY(mu_);
};

// A callback stream refused before it starts (Upload's authentication, PeerReduceStream's
// peer check): finished at once.
template <typename Request, typename Reply>
class RefusedStream final : public grpc::ServerBidiReactor<Request, Reply> {
 public:
  explicit RefusedStream(grpc::Status status) { this->Finish(std::move(status)); }

 private:
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, pb::UploadReply>* TensorGridService::UploadReactor(
    grpc::CallbackServerContext* context) {
  if (grpc::Status s = auth_.Check(*context, "Upload"); !s.ok()) {
    return new RefusedStream<grpc::ByteBuffer, pb::UploadReply>(std::move(s));
  }
  auto stream = std::make_shared<UploadStream>(
      [this](const std::string& id) { return FindSession(id); }, options_);
  stream->Start(watchdog_);
  return stream.get();
}

grpc::Status TensorGridService::FillPieces(grpc::ServerContext* context,
                                           const pb::FillPiecesRequest* request,
                                           pb::FillPiecesReply* reply) {
  if (grpc::Status s = auth_.Check(*context, "FillPieces"); !s.ok()) return s;
  if (static_cast<size_t>(request->pieces_size()) > rpc::kMaxFillPieces) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT,
                 absl::StrFormat("fill: %d pieces in one call, more than %d; offer them in "
                                 "several calls",
                                 request->pieces_size(), rpc::kMaxFillPieces));
  }
  if (grpc::Status s = CheckFillPieces(*request); !s.ok()) return s;
  const UploadTimer timer(options_.metrics, Metrics::UploadCall::kFillPieces);
  std::shared_ptr<server::Session> session = FindSession(request->session_id());
  if (session == nullptr) return Error(grpc::StatusCode::NOT_FOUND, "fill: no such session");
  for (int i = 0; i < request->pieces_size(); ++i) {
    const pb::UploadHeader& piece = request->pieces(i);
    if (piece.sha256().empty()) {
      return Error(grpc::StatusCode::INVALID_ARGUMENT,
                   absl::StrFormat("fill: piece %d has no sha256; send its bytes with Upload", i));
    }
    if (context->IsCancelled()) return Error(grpc::StatusCode::CANCELLED, "cancelled");
    if (piece.has_region()) {  // rows of a piece (server/piece_region.h).
      pb::UploadReply* result = reply->add_results();
      pb::UploadSource source = pb::UPLOAD_SOURCE_NETWORK;
      absl::StatusOr<bool> filled = server::FillPieceRegion(
          *session, piece, options_.cache, options_.metrics, options_.models, &source);
      if (!filled.ok()) return ToGrpc(filled.status());
      result->set_have_it(*filled);
      result->set_send(!*filled);
      if (*filled) result->set_source(source);
      if (*filled) result->set_received(piece.size());
      continue;
    }
    // What an Upload of this header would do before it asks for the bytes.
    absl::StatusOr<std::unique_ptr<UploadSink>> sink =
        UploadSink::Start(session, piece, options_.cache, options_.metrics, options_.models);
    if (!sink.ok()) return ToGrpc(sink.status());
    if ((*sink)->have_it()) {
      *reply->add_results() = HaveItReply(**sink);
    } else {
      reply->add_results()->set_send(true);
    }
  }
  return grpc::Status::OK;
}

namespace {

// Streams [offset, offset + size) of buf in chunks; returns the bytes sent.
grpc::Status StreamRange(const SessionBuffer& buf, uint64_t offset, uint64_t size,
                         grpc::ServerContext* context, grpc::ServerWriter<pb::DataChunk>* writer,
                         uint64_t* sent) {
  if (absl::Status s = buf.CheckRange(offset, size); !s.ok()) return ToGrpc(s);
  pb::DataChunk chunk;
  *sent = 0;
  while (*sent < size) {
    if (context->IsCancelled()) return Error(grpc::StatusCode::CANCELLED, "cancelled");
    const uint64_t n = std::min<uint64_t>(size - *sent, rpc::kChunkBytes);
    std::string* data = chunk.mutable_data();
    data->resize(n);
    if (absl::Status s = buf.Read(offset + *sent, data->data(), n); !s.ok()) return ToGrpc(s);
    if (!writer->Write(chunk)) return Error(grpc::StatusCode::CANCELLED, "client went away");
    *sent += n;
  }
  return grpc::Status::OK;
}

// A Download's handler seen from the watchdog and the session: Cancel cancels the call,
// which makes a Write blocked on a reader that stopped reading return false. The handler
// detaches it before it returns, after which Cancel does nothing.
class DownloadStream final : public CancellableStream {
 public:
  explicit DownloadStream(grpc::ServerContext* context) : context_(context) {}

  void Cancel(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    if (context_ == nullptr || !why_.ok()) return;
    why_ = status;
    context_->TryCancel();
  }
  // The handler is returning.
  void Detach() {
    absl::MutexLock lock(&mu_);
    context_ = nullptr;
  }
  // Why the stream was cancelled (OK when it was not).
  absl::Status why() const {
    absl::MutexLock lock(&mu_);
    return why_;
  }

 private:
  mutable absl::Mutex mu_;
  grpc::ServerContext* context_ ABSL_GUARDED_BY(mu_);
  absl::Status why_ ABSL_GUARDED_BY(mu_);
};

// Download's StreamRange: the buffer is held weakly and pinned only while a chunk is read
// from it, so that a FreeBuffer, or the session's end, frees its memory whatever the reader
// does; the stream then fails FAILED_PRECONDITION.
grpc::Status DownloadRange(const std::weak_ptr<SessionBuffer>& weak, uint64_t handle,
                           uint64_t offset, uint64_t size, DownloadStream& stream,
                           grpc::ServerWriter<pb::DataChunk>* writer, uint64_t* sent) {
  pb::DataChunk chunk;
  *sent = 0;
  while (*sent < size) {
    if (absl::Status why = stream.why(); !why.ok()) return ToGrpc(why);
    const uint64_t n = std::min<uint64_t>(size - *sent, rpc::kChunkBytes);
    std::string* data = chunk.mutable_data();
    data->resize(n);
    {
      std::shared_ptr<SessionBuffer> buf = weak.lock();
      if (buf == nullptr) {
        return Error(grpc::StatusCode::FAILED_PRECONDITION,
                     absl::StrFormat("download: buffer %#x was freed (FreeBuffer, or its session "
                                     "ended) during the download",
                                     handle));
      }
      if (absl::Status s = buf->Read(offset + *sent, data->data(), n); !s.ok()) return ToGrpc(s);
    }
    if (!writer->Write(chunk)) {
      absl::Status why = stream.why();
      return why.ok() ? Error(grpc::StatusCode::CANCELLED, "download: client went away")
                      : ToGrpc(why);
    }
    stream.Touch();
    *sent += n;
  }
  return grpc::Status::OK;
}

}  // namespace

grpc::Status TensorGridService::Download(grpc::ServerContext* context,
                                         const pb::DownloadRequest* request,
                                         grpc::ServerWriter<pb::DataChunk>* writer) {
  if (grpc::Status s = auth_.Check(*context, "Download"); !s.ok()) return s;
  const pb::Range& range = request->range();
  std::weak_ptr<SessionBuffer> buffer;
  auto stream = std::make_shared<DownloadStream>(context);
  {
    std::shared_ptr<server::Session> session = FindSession(request->session_id());
    if (session == nullptr) return Error(grpc::StatusCode::NOT_FOUND, "download: no such session");
    absl::StatusOr<std::shared_ptr<SessionBuffer>> buf = session->FindBuffer(range.buffer());
    if (!buf.ok()) return ToGrpc(buf.status());
    if (absl::Status s = (*buf)->CheckRange(range.offset(), range.size()); !s.ok()) {
      return ToGrpc(s);
    }
    if (!session->AddStream(stream)) {
      return Error(grpc::StatusCode::CANCELLED, "download: the session ended");
    }
    buffer = *buf;
  }  // neither the session nor the buffer is held while the client reads.
  watchdog_.Watch(stream);
  uint64_t sent = 0;
  grpc::Status st =
      DownloadRange(buffer, range.buffer(), range.offset(), range.size(), *stream, writer, &sent);
  stream->Detach();  // the context goes when this returns.
  if (options_.metrics != nullptr) options_.metrics->DownloadBytes(sent);
  return st;
}

grpc::Status TensorGridService::PeerCopy(grpc::ServerContext* context,
                                         const pb::PeerCopyRequest* request,
                                         grpc::ServerWriter<pb::DataChunk>* writer) {
  // A peer server's call: its token or certificate, from an allowed address; then the grant
  // names the buffer.
  if (grpc::Status s = auth_.Check(*context, "PeerCopy"); !s.ok()) return s;
  std::shared_ptr<SessionBuffer> buf = grants_.Find(request->grant());
  if (buf == nullptr) {
    return Error(grpc::StatusCode::NOT_FOUND, "peer copy: unknown or revoked grant");
  }
  if (request->after() != 0) {
    // The bytes are what the granting session's command `after` writes: wait for it there.
    if (buf->progress() == nullptr) {
      return Error(grpc::StatusCode::FAILED_PRECONDITION, "peer copy: the buffer has no session");
    }
    const absl::Status done =
        buf->progress()->WaitFor(request->after(), absl::FromChrono(context->deadline()),
                                 [context] { return context->IsCancelled(); });
    if (!done.ok()) return ToGrpc(done);
  }
  uint64_t sent = 0;
  grpc::Status st = StreamRange(*buf, request->offset(), request->size(), context, writer, &sent);
  if (options_.metrics != nullptr) options_.metrics->PeerCopyBytes(sent);
  return st;
}

grpc::Status TensorGridService::PeerReduce(grpc::ServerContext* context,
                                           const pb::PeerReduceRequest* request,
                                           pb::PeerReduceReply* reply) {
  if (grpc::Status s = auth_.Check(*context, "PeerReduce"); !s.ok()) return s;
  return ToGrpc(
      collectives_.Receive(*request, PeerPushes::SenderIn(*context, PeerPushes::kSenderKey)));
}

namespace {

// One PeerReduceStream: as PeerReduce, piece by piece; the first piece refused ends the
// stream with its error.
class ReduceStreamReactor final
    : public grpc::ServerBidiReactor<pb::PeerReduceRequest, pb::PeerReduceReply> {
 public:
  ReduceStreamReactor(CollectiveRunner* runner, std::string sender)
      : runner_(runner), sender_(std::move(sender)) {
    StartRead(&piece_);
  }

 private:
  void OnReadDone(bool ok) override {
    if (!ok) return Finish(grpc::Status::OK);  // the sender closed or cancelled it.
    if (absl::Status s = runner_->Receive(piece_, sender_); !s.ok()) return Finish(ToGrpc(s));
    StartRead(&piece_);
  }
  void OnDone() override { delete this; }

  CollectiveRunner* const runner_;
  const std::string sender_;  // the sending session's key (PeerPushes::kSenderKey).
  pb::PeerReduceRequest piece_;
};

}  // namespace

grpc::ServerBidiReactor<pb::PeerReduceRequest, pb::PeerReduceReply>*
TensorGridService::PeerReduceStream(grpc::CallbackServerContext* context) {
  if (grpc::Status s = auth_.Check(*context, "PeerReduceStream"); !s.ok()) {
    return new RefusedStream<pb::PeerReduceRequest, pb::PeerReduceReply>(std::move(s));
  }
  return new ReduceStreamReactor(&collectives_,
                                 PeerPushes::SenderIn(*context, PeerPushes::kSenderKey));
}

grpc::Status TensorGridService::PeerDeliver(grpc::ServerContext* context,
                                            const pb::PeerDeliverRequest* request,
                                            pb::PeerDeliverReply* reply) {
  if (grpc::Status s = auth_.Check(*context, "PeerDeliver"); !s.ok()) return s;
  return ToGrpc(pushes_.Receive(*context, *request));
}

grpc::Status TensorGridService::PeerLink(grpc::ServerContext* context,
                                         const pb::PeerLinkRequest* request,
                                         pb::PeerLinkReply* reply) {
  if (grpc::Status s = auth_.Check(*context, "PeerLink"); !s.ok()) return s;
  absl::StatusOr<std::string> ticket = links_.IssueTicket();
  if (!ticket.ok()) return ToGrpc(ticket.status());
  reply->set_port(static_cast<uint32_t>(links_.port()));
  reply->set_ticket(*std::move(ticket));
  return grpc::Status::OK;
}

}  // namespace tg::server
