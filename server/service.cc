#include "server/service.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "core/op.h"
#include "core/shape_rules.h"
#include "proto/content_hash.h"
#include "proto/protocol.h"
#include "proto/upload_frame.h"
#include "server/blob_cache.h"
#include "server/log.h"
#include "server/memory_reservation.h"
#include "server/metrics.h"
#include "server/random_id.h"
#include "server/reply_sequencer.h"
#include "server/upload_sink.h"

namespace tg::server {
namespace {

namespace pb = ::tensorgrid::v1;

// Freed weight buffers are kept (for the next load of the same model) up to this share of
// the host's memory; the kept memory is given back at once when an allocation needs room.
constexpr uint64_t kRecycleShareOfHostMemory = 4;

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

grpc::Status Error(grpc::StatusCode code, std::string message) {
  return grpc::Status(code, std::move(message));
}

// The client's address as people write it: "ipv4:127.0.0.1:5432" becomes 127.0.0.1:5432,
// "ipv6:%5B::1%5D:5432" becomes [::1]:5432.
std::string PeerAddress(const grpc::ServerContext& context) {
  const std::string full = context.peer();
  absl::string_view peer = full;
  for (absl::string_view scheme : {"ipv4:", "ipv6:"}) {
    if (absl::ConsumePrefix(&peer, scheme)) break;
  }
  return absl::StrReplaceAll(peer, {{"%5B", "["}, {"%5D", "]"}});
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

// OK when the call carries `authorization: Bearer <expected>`.
grpc::Status CheckBearerToken(const grpc::ServerContext& context, const std::string& expected) {
  const auto& md = context.client_metadata();
  auto it = md.find(rpc::kAuthMetadataKey);
  if (it == md.end()) {
    return Error(grpc::StatusCode::UNAUTHENTICATED,
                 "missing bearer token: send metadata 'authorization: Bearer <token>'");
  }
  const absl::string_view value(it->second.data(), it->second.size());
  constexpr absl::string_view kBearer = "Bearer ";
  if (!absl::StartsWith(value, kBearer)) {
    return Error(grpc::StatusCode::UNAUTHENTICATED,
                 "malformed authorization metadata: expected 'Bearer <token>'");
  }
  const absl::string_view token = value.substr(kBearer.size());
  // Compare digests in constant time: neither the length nor a prefix of the token leaks.
  const rpc::Sha256Digest got = rpc::Sha256(token.data(), token.size());
  const rpc::Sha256Digest want = rpc::Sha256(expected.data(), expected.size());
  if (CRYPTO_memcmp(got.data(), want.data(), got.size()) != 0) {
    return Error(grpc::StatusCode::PERMISSION_DENIED, "wrong bearer token");
  }
  return grpc::Status::OK;
}

}  // namespace

TensorGridService::TensorGridService(ServiceOptions options)
    : options_(std::move(options)),
      server_id_(RandomHex(16)),
      recycler_(
          std::make_shared<SessionBufferRecycler>(HostMemoryTotal() / kRecycleShareOfHostMemory)),
      peers_(options_.peer),
      collectives_(&peers_, &grants_, options_.metrics),
      pushes_(&peers_, &grants_, options_.metrics) {
  for (Device* d : options_.devices) supported_ops_.push_back(SupportedOps(d));
  // gRPC owns method handlers and takes them as raw pointers.
  MarkMethodStreamed(rpc::kUploadMethodIndex,
                     new grpc::internal::BidiStreamingHandler<TensorGridService, grpc::ByteBuffer,
                                                              pb::UploadReply>(
                         [](TensorGridService* service, grpc::ServerContext* context,
                            grpc::ServerReaderWriter<pb::UploadReply, grpc::ByteBuffer>* stream) {
                           return service->UploadRaw(context, stream);
                         },
                         this));
}

TensorGridService::~TensorGridService() = default;

size_t TensorGridService::active_sessions() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

grpc::Status TensorGridService::CheckAuth(const grpc::ServerContext* context) const {
  if (options_.auth_token.empty()) return grpc::Status::OK;
  grpc::Status status = CheckBearerToken(*context, options_.auth_token);
  if (!status.ok()) {
    kServerLog.Warn("call refused",
                    {{"peer", PeerAddress(*context)}, {"error", status.error_message()}});
  }
  return status;
}

std::shared_ptr<server::Session> TensorGridService::FindSession(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second;
}

grpc::Status TensorGridService::Hello(grpc::ServerContext* context, const pb::HelloRequest* request,
                                      pb::HelloReply* reply) {
  if (grpc::Status s = CheckAuth(context); !s.ok()) return s;
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
    const DeviceMemory mem = d->memory();
    BufferType* bt = d->default_buffer_type();
    // Memory kept for reuse is free to the next session (a client splits layers by it).
    info->set_memory_free(std::min(mem.total, mem.free + recycler_->kept_bytes(bt)));
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

grpc::Status TensorGridService::Session(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<pb::SessionReply, pb::SessionRequest>* stream) {
  if (grpc::Status s = CheckAuth(context); !s.ok()) return s;
  const std::string id = RandomHex(16);
  SessionEnv env;
  env.devices = options_.devices;
  env.mem_limit = options_.session_mem_limit;
  env.metrics = options_.metrics;
  env.grants = &grants_;
  env.peers = &peers_;
  env.models = options_.models;
  env.cache = options_.cache;
  env.collectives = &collectives_;
  env.recycler = recycler_;
  env.pushes = &pushes_;
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
    return Error(grpc::StatusCode::RESOURCE_EXHAUSTED,
                 absl::StrFormat("server full: %d sessions open (--max-sessions %d)", open_sessions,
                                 options_.max_sessions));
  }
  kServerLog.Info("session opened", {{"id", session->log_id()},
                                     {"peer", PeerAddress(*context)},
                                     {"sessions", open_sessions + 1}});
  if (options_.metrics != nullptr) options_.metrics->SessionOpened();
  pb::SessionReply started;
  started.set_id(0);
  started.mutable_started()->set_session_id(id);
  if (stream->Write(started)) {
    // Replies leave from whichever thread finishes a command (the session's device lanes),
    // in request order, while this thread reads on: gRPC allows one Read beside one Write.
    ReplySequencer replies([stream](const pb::SessionReply& r) { return stream->Write(r); },
                           session->progress());
    auto request = std::make_shared<pb::SessionRequest>();
    while (replies.ok() && stream->Read(request.get())) {
      session->Post(std::move(request), &replies);
      request = std::make_shared<pb::SessionRequest>();
    }
    session->Quiesce();  // nothing may write to the stream once this handler returns.
    replies.WaitSent();
  }
  collectives_.EndSession(id);
  {
    absl::MutexLock lock(&mu_);
    sessions_.erase(id);
    open_sessions = sessions_.size();
  }
  kServerLog.Info("session closed", {{"id", session->log_id()},
                                     {"buffers", session->buffer_count()},
                                     {"bytes_held", session->bytes_held()},
                                     {"sessions", open_sessions}});
  session.reset();  // frees everything unless an Upload/Download still holds it.
  if (options_.metrics != nullptr) options_.metrics->SessionClosed();
  return grpc::Status::OK;
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

}  // namespace

grpc::Status TensorGridService::UploadRaw(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<pb::UploadReply, grpc::ByteBuffer>* stream) {
  if (grpc::Status s = CheckAuth(context); !s.ok()) return s;
  const UploadTimer timer(options_.metrics, Metrics::UploadCall::kUpload);
  grpc::ByteBuffer raw;
  pb::UploadMessage msg;
  if (!stream->Read(&raw) || !ParseUploadMessage(&raw, &msg) ||
      msg.part_case() != pb::UploadMessage::kHeader) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT, "upload: the first message must be a header");
  }
  std::shared_ptr<server::Session> session = FindSession(msg.header().session_id());
  if (session == nullptr) return Error(grpc::StatusCode::NOT_FOUND, "upload: no such session");
  absl::StatusOr<std::unique_ptr<UploadSink>> sink = UploadSink::Start(
      std::move(session), msg.header(), options_.cache, options_.metrics, options_.models);
  if (!sink.ok()) return ToGrpc(sink.status());
  if ((*sink)->have_it()) {
    stream->Write(HaveItReply(**sink));
    return grpc::Status::OK;
  }
  pb::UploadReply reply;
  reply.set_send(true);
  if (!stream->Write(reply)) return Error(grpc::StatusCode::CANCELLED, "upload: client went away");
  std::vector<grpc::Slice> slices;
  std::vector<absl::string_view> parts;
  while (stream->Read(&raw)) {
    absl::Status s;
    if (rpc::FindChunk(raw, &slices, &parts)) {
      s = (*sink)->ReceiveChunk(parts);
    } else if (ParseUploadMessage(&raw, &msg)) {
      s = (*sink)->Receive(msg);
    } else {
      s = absl::InvalidArgumentError("upload: a message that is not an UploadMessage");
    }
    if (!s.ok()) return ToGrpc(s);
  }
  absl::StatusOr<uint64_t> received = (*sink)->Finish();
  if (!received.ok()) return ToGrpc(received.status());
  pb::UploadReply done;
  done.set_received(*received);
  stream->Write(done);
  return grpc::Status::OK;
}

grpc::Status TensorGridService::FillPieces(grpc::ServerContext* context,
                                           const pb::FillPiecesRequest* request,
                                           pb::FillPiecesReply* reply) {
  if (grpc::Status s = CheckAuth(context); !s.ok()) return s;
  if (static_cast<size_t>(request->pieces_size()) > rpc::kMaxFillPieces) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT,
                 absl::StrFormat("fill: %d pieces in one call, more than %d; offer them in "
                                 "several calls",
                                 request->pieces_size(), rpc::kMaxFillPieces));
  }
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

}  // namespace

grpc::Status TensorGridService::Download(grpc::ServerContext* context,
                                         const pb::DownloadRequest* request,
                                         grpc::ServerWriter<pb::DataChunk>* writer) {
  if (grpc::Status s = CheckAuth(context); !s.ok()) return s;
  std::shared_ptr<server::Session> session = FindSession(request->session_id());
  if (session == nullptr) return Error(grpc::StatusCode::NOT_FOUND, "download: no such session");
  absl::StatusOr<std::shared_ptr<SessionBuffer>> buf =
      session->FindBuffer(request->range().buffer());
  if (!buf.ok()) return ToGrpc(buf.status());
  uint64_t sent = 0;
  grpc::Status st = StreamRange(**buf, request->range().offset(), request->range().size(), context,
                                writer, &sent);
  if (options_.metrics != nullptr) options_.metrics->DownloadBytes(sent);
  return st;
}

grpc::Status TensorGridService::PeerCopy(grpc::ServerContext* context,
                                         const pb::PeerCopyRequest* request,
                                         grpc::ServerWriter<pb::DataChunk>* writer) {
  // The grant is the capability: no bearer token (servers do not share clients' tokens).
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
  // As PeerCopy: the grant is the capability, not the bearer token.
  return ToGrpc(collectives_.Receive(*request));
}

namespace {

// One PeerReduceStream: as PeerReduce, piece by piece; the first piece refused ends the
// stream with its error.
class ReduceStreamReactor final
    : public grpc::ServerBidiReactor<pb::PeerReduceRequest, pb::PeerReduceReply> {
 public:
  explicit ReduceStreamReactor(CollectiveRunner* runner) : runner_(runner) { StartRead(&piece_); }

 private:
  void OnReadDone(bool ok) override {
    if (!ok) return Finish(grpc::Status::OK);  // the sender closed or cancelled it.
    if (absl::Status s = runner_->Receive(piece_); !s.ok()) return Finish(ToGrpc(s));
    StartRead(&piece_);
  }
  void OnDone() override { delete this; }

  CollectiveRunner* const runner_;
  pb::PeerReduceRequest piece_;
};

}  // namespace

grpc::ServerBidiReactor<pb::PeerReduceRequest, pb::PeerReduceReply>*
TensorGridService::PeerReduceStream(grpc::CallbackServerContext* context) {
  // As PeerCopy: the grant in each piece is the capability, not the bearer token.
  return new ReduceStreamReactor(&collectives_);
}

grpc::Status TensorGridService::PeerDeliver(grpc::ServerContext* context,
                                            const pb::PeerDeliverRequest* request,
                                            pb::PeerDeliverReply* reply) {
  // As PeerCopy: the grants are the capability, not the bearer token.
  return ToGrpc(pushes_.Receive(*request));
}

}  // namespace tg::server
