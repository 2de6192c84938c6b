#include "client/connection.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/lost_endpoint.h"
#include "core/op.h"
#include "core/status_macros.h"
#include "proto/cache_proof.h"
#include "proto/content_hash.h"
#include "proto/grpc_channel.h"
#include "proto/protocol.h"
#include "proto/upload_frame.h"

namespace tg::rpc {
namespace {

namespace pb = tensorgrid::v1;

// Long enough for a loaded server over a slow link, short enough that a wrong address fails
// while the user still waits for it.
constexpr absl::Duration kHelloDeadline = absl::Seconds(10);

// A failed call to the server at `endpoint`. The codes of a broken connection and of a call
// past its deadline (CallDeadlines: the most this client waits) report the server lost, as
// the Session stream's do (SessionChannel).
absl::Status FromGrpc(const grpc::Status& s, absl::string_view endpoint, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  absl::Status status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat("rpc-server ", endpoint, ": ", what, ": ", s.error_message()));
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
      s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    SetLostEndpoint(status, endpoint);
  }
  return status;
}

// The UploadHeader of `job` (its session id left to the caller): with `digest`, the bytes'
// hash and their place in the model file, else whether the server should store them. With
// `prove` (a cache that wants it) and a digest, the proof that this client holds the bytes,
// salted with `session_id` (proto/cache_proof.h): one more hash pass over them, which buys
// the cache hit. A piece of a model file the server opened is read from there, no proof needed.
void SetUploadHeader(const UploadJob& job, const std::optional<Sha256Digest>& digest, bool prove,
                     absl::string_view session_id, pb::UploadHeader* h) {
  h->set_buffer(job.buffer);
  h->set_offset(job.offset);
  h->set_size(job.written());
  if (job.region) {
    pb::PieceRegion* r = h->mutable_region();
    r->set_piece_size(job.size());
    r->set_offset(job.region->offset);
    r->set_row_size(job.region->row_size);
    r->set_rows(job.region->rows);
    r->set_stride(job.region->stride);
    r->set_buffer_stride(job.region->buffer_stride);
  }
  if (digest.has_value()) {
    h->set_sha256(digest->data(), digest->size());
    h->set_model_file(job.model_file);
    h->set_file_offset(job.file_offset);
    if (prove && job.model_file == 0) {
      if (std::optional<Sha256Digest> proof = CacheProof(session_id, job.data(), job.size())) {
        h->set_cache_proof(proof->data(), proof->size());
      }
    }
  } else {
    h->set_store(job.store);
  }
}

// What a `have_it` reply for `size` bytes did: they came from the server's file or its cache.
UploadResult HadIt(const pb::UploadReply& reply, uint64_t size) {
  UploadResult result;
  (reply.source() == pb::UPLOAD_SOURCE_MODEL_FILE ? result.from_file : result.skipped) = size;
  return result;
}

}  // namespace

Connection::Connection(std::string endpoint, ClientOptions options)
    : endpoint_(std::move(endpoint)),
      options_(std::move(options)),
      deadlines_(options_.deadlines) {}

Connection::~Connection() {
  if (uploads_ != nullptr) uploads_->Wait().IgnoreError();
  uploads_.reset();
  session_.reset();  // drains: reply handlers still see the caches.
}

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(const std::string& endpoint,
                                                             const ClientOptions& options) {
  std::unique_ptr<Connection> c(new Connection(endpoint, options));
  TG_RETURN_IF_ERROR(c->Start());
  return c;
}

void Connection::AddAuth(grpc::ClientContext* context) const {
  if (!options_.token.empty()) {
    context->AddMetadata(kAuthMetadataKey, absl::StrCat("Bearer ", options_.token));
  }
}

absl::Status Connection::Start() {
  channel_ = NewChannel(endpoint_, {.ca_pem = options_.tls_ca_pem,
                                    .cert_pem = options_.tls_cert_pem,
                                    .key_pem = options_.tls_key_pem});
  stub_ = pb::TensorGrid::NewStub(channel_);
  upload_method_ = std::make_unique<grpc::internal::RpcMethod>(
      kUploadMethod, grpc::internal::RpcMethod::BIDI_STREAMING, channel_);
  TG_RETURN_IF_ERROR(Hello());
  auto context = std::make_unique<grpc::ClientContext>();
  AddAuth(context.get());
  TG_ASSIGN_OR_RETURN(session_,
                      SessionChannel::Open(*stub_, std::move(context), endpoint_, &deadlines_));
  uploads_ = std::make_unique<UploadPool>(options_.upload_streams,
                                          [this](const UploadJob& job) { return UploadOne(job); });
  return absl::OkStatus();
}

absl::Status Connection::Hello() {
  pb::HelloRequest request;
  request.set_protocol_version(kProtocolVersion);
  request.set_op_table_fingerprint(OpTableFingerprint());
  request.set_client_name("tensorgrid-client");
  grpc::ClientContext context;
  AddAuth(&context);
  context.set_deadline(absl::ToChronoTime(absl::Now() + kHelloDeadline));
  grpc::Status s = stub_->Hello(&context, request, &hello_);
  if (!s.ok()) {
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
        s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      return WithLostEndpoint(
          absl::UnavailableError(
              absl::StrCat("cannot reach rpc-server at ", endpoint_, ": ", s.error_message())),
          endpoint_);
    }
    return FromGrpc(s, endpoint_, "hello refused");
  }
  if (hello_.protocol_version() != kProtocolVersion ||
      hello_.op_table_fingerprint() != OpTableFingerprint()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "rpc-server %s speaks protocol %d with op table %016x; this client speaks %d with %016x "
        "(use the same tensorgrid version on both sides)",
        endpoint_, hello_.protocol_version(), hello_.op_table_fingerprint(), kProtocolVersion,
        OpTableFingerprint()));
  }
  return absl::OkStatus();
}

absl::StatusOr<Connection::Reply> Connection::Call(Request request) {
  TG_RETURN_IF_ERROR(WaitUploads());
  const bool may_write = CommandMayWrite(request);
  uint64_t id = 0;
  absl::StatusOr<Reply> reply = session_->Call(std::move(request), &id);
  if (may_write && id != 0) inline_outputs_.StaleBefore(id);
  return reply;
}

absl::Status Connection::Post(Request request, ReplyHandler on_reply, uint64_t* id) {
  TG_RETURN_IF_ERROR(WaitUploads());
  const bool may_write = CommandMayWrite(request);
  uint64_t sent = 0;
  absl::Status s = session_->Post(std::move(request), std::move(on_reply), &sent);
  if (may_write && sent != 0) inline_outputs_.StaleBefore(sent);
  if (id != nullptr) *id = sent;
  return s;
}

absl::Status Connection::Drain() {
  TG_RETURN_IF_ERROR(WaitUploads());
  return session_->Drain();
}

absl::Status Connection::Flush() {
  TG_RETURN_IF_ERROR(WaitUploads());
  return session_->Flush();
}

bool Connection::orders_pulls() const { return hello_.protocol_minor() >= kMinorOrderedPull; }

absl::Status Connection::QueueWrite(uint32_t device, uint64_t buffer, uint64_t offset,
                                    const void* data, size_t size) {
  // Writes that no longer fit go out first: an upload still in flight to the same range
  // must land before them.
  if (session_->queued_write_bytes() + size > QueuedWrites::kMaxBytes) {
    TG_RETURN_IF_ERROR(WaitUploads());
  }
  inline_outputs_.StaleBefore(session_->last_sent_id() + 1);  // the write goes after them.
  return session_->QueueWrite(device, buffer, offset, data, size);
}

absl::Status Connection::Upload(uint64_t buffer, uint64_t offset, const void* data, size_t size,
                                bool cacheable) {
  UploadJob job;
  job.buffer = buffer;
  job.offset = offset;
  job.bytes.assign(static_cast<const char*>(data), size);
  job.cacheable = cacheable;
  return QueueUpload(std::move(job));
}

absl::Status Connection::QueueUpload(UploadJob job) {
  // Commands posted earlier (a Clear of the same buffer) must land before these bytes.
  TG_RETURN_IF_ERROR(session_->DrainIfBusy());
  inline_outputs_.StaleBefore(session_->last_sent_id() + 1);
  return uploads_->Add(std::move(job));
}

absl::Status Connection::WaitUploads() {
  return uploads_ == nullptr ? absl::OkStatus() : uploads_->Wait();
}

absl::StatusOr<std::vector<bool>> Connection::FillPieces(absl::Span<const UploadJob* const> jobs) {
  if (hello_.protocol_minor() < kMinorFillPieces) {
    return absl::UnimplementedError(absl::StrCat("rpc-server ", endpoint_, " has no FillPieces"));
  }
  if (jobs.size() > kMaxFillPieces) {
    return absl::InvalidArgumentError(
        absl::StrFormat("FillPieces: %d pieces, more than %d; offer them in several calls",
                        jobs.size(), kMaxFillPieces));
  }
  TG_RETURN_IF_ERROR(session_->DrainIfBusy());  // as QueueUpload: after the commands before.
  inline_outputs_.StaleBefore(session_->last_sent_id() + 1);
  pb::FillPiecesRequest request;
  request.set_session_id(session_->session_id());
  uint64_t bytes = 0;
  for (const UploadJob* job : jobs) {
    if (!job->digest.has_value()) {
      return absl::InvalidArgumentError("FillPieces: a job without a digest");
    }
    if (job->region && hello_.protocol_minor() < kMinorPieceRegions) {
      return absl::UnimplementedError(
          absl::StrCat("rpc-server ", endpoint_, " fills no rows of pieces"));
    }
    SetUploadHeader(*job, job->digest, ProvesCache(), session_->session_id(), request.add_pieces());
    bytes += job->size();
  }
  grpc::ClientContext context;
  AddAuth(&context);
  // The server reads the bytes from its disk: a deadline as for sending them is ample.
  const absl::Duration limit = deadlines_.ForTransfer(bytes);
  context.set_deadline(absl::ToChronoTime(absl::Now() + limit));
  pb::FillPiecesReply reply;
  TG_RETURN_IF_ERROR(FromGrpc(stub_->FillPieces(&context, request, &reply), endpoint_,
                              absl::StrFormat("FillPieces of %d pieces, %d bytes (deadline %s)",
                                              jobs.size(), bytes, absl::FormatDuration(limit))));
  if (static_cast<size_t>(reply.results_size()) != jobs.size()) {
    return absl::InternalError(absl::StrFormat("rpc-server %s: FillPieces answered %d of %d pieces",
                                               endpoint_, reply.results_size(), jobs.size()));
  }
  std::vector<bool> filled(jobs.size(), false);
  for (size_t i = 0; i < jobs.size(); ++i) {
    const pb::UploadReply& r = reply.results(static_cast<int>(i));
    if (!r.have_it()) continue;
    const UploadResult result = HadIt(r, jobs[i]->written());
    if (jobs[i]->on_done) jobs[i]->on_done(result);
    uploads_->RecordDone(jobs[i]->written(), result);
    filled[i] = true;
  }
  return filled;
}

absl::StatusOr<pb::OpenModelFileReply> Connection::OpenModelFile(absl::string_view name,
                                                                 const ModelIdentity& identity) {
  Request request;
  pb::OpenModelFile* open = request.mutable_open_model_file();
  open->set_name(std::string(name));
  open->set_size(identity.size);
  open->set_header_sha256(identity.header.data(), identity.header.size());
  TG_ASSIGN_OR_RETURN(Reply reply, Call(std::move(request)));
  return reply.model_file();
}

absl::StatusOr<uint64_t> Connection::CacheBlobs() {
  Request request;
  request.mutable_cache_stats();
  TG_ASSIGN_OR_RETURN(Reply reply, Call(std::move(request)));
  return reply.cache_stats().cache_blobs();
}

namespace {

grpc::ByteBuffer Serialized(const pb::UploadMessage& message) {
  const std::string bytes = message.SerializeAsString();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace

absl::StatusOr<UploadResult> Connection::UploadOne(const UploadJob& job) {
  if (!job.cacheable) return UploadOnce(job, std::nullopt);
  if (!job.digest.has_value()) return UploadOnce(job, Sha256(job.data(), job.size()));
  absl::StatusOr<UploadResult> result = UploadOnce(job, job.digest);
  if (!absl::IsDataLoss(result.status())) return result;
  // The server hashed what it received and it was not the given digest: the digest came
  // from a stale sidecar, or the bytes changed under us. With their own digest they still
  // arrive verified.
  const Sha256Digest actual = Sha256(job.data(), job.size());
  if (actual == *job.digest) return result;
  if (job.on_stale_digest) job.on_stale_digest();
  return UploadOnce(job, actual);
}

absl::StatusOr<UploadResult> Connection::UploadOnce(const UploadJob& job,
                                                    const std::optional<Sha256Digest>& digest) {
  grpc::ClientContext context;
  AddAuth(&context);
  const absl::Time start = absl::Now();
  const absl::Duration limit = deadlines_.ForTransfer(job.size());
  context.set_deadline(absl::ToChronoTime(start + limit));
  const std::string what =
      absl::StrFormat("upload of %d bytes (deadline %s at %.1f MB/s)", job.size(),
                      absl::FormatDuration(limit), deadlines_.bytes_per_second() / 1e6);
  // Raw byte buffers, so that chunks point at the job's bytes (proto/upload_frame.h).
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, pb::UploadReply>> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, pb::UploadReply>::Create(
          channel_.get(), *upload_method_, &context));
  pb::UploadMessage header;
  header.mutable_header()->set_session_id(session_->session_id());
  SetUploadHeader(job, digest, ProvesCache(), session_->session_id(), header.mutable_header());
  UploadResult result;
  pb::UploadReply reply;
  if (!stream->Write(Serialized(header)) || !stream->Read(&reply)) {
    return FromGrpc(stream->Finish(), endpoint_, what);
  }
  if (reply.have_it()) {
    result = HadIt(reply, job.size());
  } else {
    for (size_t pos = 0; pos < job.size(); pos += kChunkBytes) {
      if (!stream->Write(ChunkFrame(job.data() + pos, std::min(kChunkBytes, job.size() - pos)))) {
        break;
      }
    }
    result.sent = job.size();
  }
  stream->WritesDone();
  while (stream->Read(&reply)) {
  }
  grpc::Status s = stream->Finish();
  if (!s.ok()) {
    return FromGrpc(s, endpoint_, what);
  }
  deadlines_.RecordTransfer(result.sent, absl::Now() - start);
  return result;
}

absl::Status Connection::Download(uint64_t buffer, uint64_t offset, void* data, size_t size) {
  TG_RETURN_IF_ERROR(Drain());
  grpc::ClientContext context;
  AddAuth(&context);
  const absl::Time start = absl::Now();
  const absl::Duration limit = deadlines_.ForTransfer(size);
  context.set_deadline(absl::ToChronoTime(start + limit));
  pb::DownloadRequest request;
  request.set_session_id(session_->session_id());
  request.mutable_range()->set_buffer(buffer);
  request.mutable_range()->set_offset(offset);
  request.mutable_range()->set_size(size);
  auto stream = stub_->Download(&context, request);
  pb::DataChunk chunk;
  size_t got = 0;
  while (stream->Read(&chunk)) {
    if (chunk.data().size() > size - got) {
      context.TryCancel();
      stream->Finish();
      return absl::InternalError(
          absl::StrCat("rpc-server ", endpoint_, ": download sent too much"));
    }
    std::memcpy(static_cast<char*>(data) + got, chunk.data().data(), chunk.data().size());
    got += chunk.data().size();
  }
  TG_RETURN_IF_ERROR(FromGrpc(
      stream->Finish(), endpoint_,
      absl::StrFormat("download of %d bytes (deadline %s)", size, absl::FormatDuration(limit))));
  if (got != size) {
    return absl::DataLossError(
        absl::StrFormat("rpc-server %s: download of %d bytes returned %d", endpoint_, size, got));
  }
  deadlines_.RecordTransfer(size, absl::Now() - start);
  return absl::OkStatus();
}

absl::StatusOr<std::string> Connection::PeerReadGrant(uint64_t buffer) {
  if (std::optional<std::string> grant = grants_.Find(buffer)) return *std::move(grant);
  Request request;
  request.mutable_grant_peer_read()->set_buffer(buffer);
  TG_ASSIGN_OR_RETURN(Reply reply, Call(std::move(request)));
  grants_.Remember(buffer, reply.grant().grant());
  return reply.grant().grant();
}

void Connection::ForgetBuffer(uint64_t buffer) {
  grants_.Forget(buffer);
  inline_outputs_.ForgetBuffer(buffer);
}

}  // namespace tg::rpc
