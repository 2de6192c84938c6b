#include "client/connection.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/op.h"
#include "core/status_macros.h"
#include "proto/content_hash.h"
#include "proto/protocol.h"

namespace tg::rpc {
namespace {

namespace pb = tensorgrid::v1;

// A dead or hung server is noticed within about keepalive time + timeout.
constexpr int kKeepaliveMs = 2000;
constexpr int kKeepaliveTimeoutMs = 2000;
constexpr absl::Duration kHelloDeadline = absl::Seconds(10);

absl::Status FromGrpc(const grpc::Status& s, absl::string_view endpoint, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat("rpc-server ", endpoint, ": ", what, ": ", s.error_message()));
}

}  // namespace

Connection::Connection(std::string endpoint, ClientOptions options)
    : endpoint_(std::move(endpoint)), options_(std::move(options)) {}

Connection::~Connection() {
  if (uploads_ != nullptr) uploads_->Wait().IgnoreError();
  uploads_.reset();
  absl::MutexLock lock(&mu_);
  if (session_ != nullptr && broken_.ok()) {
    DrainLocked().IgnoreError();
    session_->WritesDone();
    session_->Finish().ok();
  }
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
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (options_.tls_ca_pem.empty()) {
    credentials = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options_.tls_ca_pem;
    ssl.pem_cert_chain = options_.tls_cert_pem;
    ssl.pem_private_key = options_.tls_key_pem;
    credentials = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(kMaxMessageBytes));
  args.SetMaxSendMessageSize(static_cast<int>(kMaxMessageBytes));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Several channels to one server (parallel uploads) must not share one TCP connection's
  // flow-control window with the session stream.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  channel_ = grpc::CreateCustomChannel(endpoint_, credentials, args);
  stub_ = pb::TensorGrid::NewStub(channel_);

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
      return absl::UnavailableError(
          absl::StrCat("cannot reach rpc-server at ", endpoint_, ": ", s.error_message()));
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

  absl::MutexLock lock(&mu_);
  session_context_ = std::make_unique<grpc::ClientContext>();
  AddAuth(session_context_.get());
  session_ = stub_->Session(session_context_.get());
  Reply started;
  TG_RETURN_IF_ERROR(ReadOneLocked(&started));
  if (started.code() != 0 || !started.has_started()) {
    return absl::Status(
        static_cast<absl::StatusCode>(started.code() ? started.code() : 13),
        absl::StrCat("rpc-server ", endpoint_, ": session refused: ", started.message()));
  }
  session_id_ = started.started().session_id();
  uploads_ = std::make_unique<UploadPool>(
      options_.upload_streams, [this](const UploadJob& job) { return UploadOne(job); }, endpoint_,
      options_.progress);
  return absl::OkStatus();
}

absl::Status Connection::BrokenLocked(absl::string_view what) {
  if (!broken_.ok()) return broken_;
  grpc::Status s = session_->Finish();
  std::string detail = s.ok() ? "the stream ended" : s.error_message();
  const auto code = s.ok() || s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                            s.error_code() == grpc::StatusCode::CANCELLED
                        ? absl::StatusCode::kUnavailable
                        : static_cast<absl::StatusCode>(s.error_code());
  broken_ =
      absl::Status(code, absl::StrCat("rpc-server ", endpoint_, " is gone (", what, "): ", detail));
  return broken_;
}

absl::StatusOr<uint64_t> Connection::WriteLocked(Request request, bool may_batch) {
  const uint64_t id = next_id_++;
  request.set_id(id);
  if (batch_depth_ > 0 && may_batch) {
    const size_t bytes = request.ByteSizeLong();
    if (bytes <= kMaxBatchBytes) {
      if (batch_bytes_ + bytes > kMaxBatchBytes) TG_RETURN_IF_ERROR(SendBatchLocked());
      *batch_.mutable_batch()->add_commands() = std::move(request);
      batch_bytes_ += bytes;
      if (batch_.batch().commands_size() >= kMaxBatchCommands)
        TG_RETURN_IF_ERROR(SendBatchLocked());
      return id;
    }
  }
  TG_RETURN_IF_ERROR(SendBatchLocked());
  if (!session_->Write(request)) return BrokenLocked("write failed");
  return id;
}

absl::Status Connection::SendBatchLocked() {
  if (!batch_.has_batch() || batch_.batch().commands_size() == 0) return absl::OkStatus();
  bool written;
  if (batch_.batch().commands_size() == 1) {
    written = session_->Write(batch_.batch().commands(0));
  } else {
    written = session_->Write(batch_);
  }
  batch_.Clear();
  batch_bytes_ = 0;
  if (!written) return BrokenLocked("write failed");
  return absl::OkStatus();
}

void Connection::BeginBatch() {
  absl::MutexLock lock(&mu_);
  ++batch_depth_;
}

absl::Status Connection::EndBatch() {
  absl::MutexLock lock(&mu_);
  if (batch_depth_ > 0 && --batch_depth_ > 0) return absl::OkStatus();
  if (!broken_.ok()) return broken_;
  return SendBatchLocked();
}

absl::Status Connection::FlushWritesLocked() {
  std::vector<pb::WriteRange> writes = std::move(queued_writes_);
  queued_writes_.clear();
  queued_bytes_ = 0;
  for (pb::WriteRange& w : writes) {
    Request request;
    *request.mutable_write() = std::move(w);
    TG_ASSIGN_OR_RETURN(const uint64_t id, WriteLocked(std::move(request), true));
    pending_.push_back({id, nullptr});
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Connection::SendLocked(Request request, bool may_batch) {
  if (!broken_.ok()) return broken_;
  // A command that may write makes the outputs an earlier Compute returned stale. (A freed
  // buffer's outputs go in ForgetBuffer.)
  if (!request.has_read() && !request.has_alloc_buffer() && !request.has_free_buffer() &&
      !request.has_grant_peer_read() && !request.has_cache_stats()) {
    ClearInlineOutputs();
  }
  if (request.has_compute()) {
    // The queued writes are the graph's inputs: they travel in the same message.
    for (pb::WriteRange& w : queued_writes_)
      *request.mutable_compute()->add_inputs() = std::move(w);
    queued_writes_.clear();
    queued_bytes_ = 0;
  } else {
    TG_RETURN_IF_ERROR(FlushWritesLocked());
  }
  return WriteLocked(std::move(request), may_batch);
}

absl::Status Connection::QueueWrite(uint64_t buffer, uint64_t offset, const void* data,
                                    size_t size) {
  bool full;
  {
    absl::MutexLock lock(&mu_);
    full = queued_bytes_ + size > kMaxQueuedWriteBytes;
  }
  // Flushed writes go out now: an upload still in flight to the same range must land first.
  if (full) TG_RETURN_IF_ERROR(WaitUploads());
  ClearInlineOutputs();
  absl::MutexLock lock(&mu_);
  if (!broken_.ok()) return broken_;
  if (queued_bytes_ + size > kMaxQueuedWriteBytes) TG_RETURN_IF_ERROR(FlushWritesLocked());
  pb::WriteRange& w = queued_writes_.emplace_back();
  w.set_buffer(buffer);
  w.set_offset(offset);
  w.set_data(data, size);
  queued_bytes_ += size;
  return absl::OkStatus();
}

absl::Status Connection::ReadOneLocked(Reply* reply) {
  if (!broken_.ok()) return broken_;
  if (!session_->Read(reply)) return BrokenLocked("read failed");
  return absl::OkStatus();
}

absl::Status Connection::ReplyStatus(const Reply& reply) const {
  if (reply.code() == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(reply.code()),
                      absl::StrCat("rpc-server ", endpoint_, ": ", reply.message()));
}

absl::Status Connection::HandleReplyLocked() {
  Reply reply;
  TG_RETURN_IF_ERROR(ReadOneLocked(&reply));
  if (!reply.has_batch()) return HandleOneReplyLocked(reply);
  for (Reply& one : *reply.mutable_batch()->mutable_replies()) {
    TG_RETURN_IF_ERROR(HandleOneReplyLocked(one));
  }
  return absl::OkStatus();
}

absl::Status Connection::HandleOneReplyLocked(Reply& reply) {
  if (pending_.empty() || reply.id() != pending_.front().id) {
    broken_ = absl::InternalError(
        absl::StrFormat("rpc-server %s: reply %d out of order (want %s)", endpoint_, reply.id(),
                        pending_.empty() ? "none" : absl::StrCat(pending_.front().id)));
    return broken_;
  }
  Pending p = std::move(pending_.front());
  pending_.pop_front();
  absl::Status s = ReplyStatus(reply);
  if (p.on_reply) {
    absl::Status handled = p.on_reply(reply);
    if (s.ok()) s = handled;
  }
  if (!s.ok() && deferred_error_.ok()) {
    deferred_error_ = s;
    deferred_error_id_ = p.id;
  }
  return absl::OkStatus();
}

absl::Status Connection::TakeDeferredErrorLocked(uint64_t up_to) {
  if (deferred_error_id_ > up_to) return absl::OkStatus();
  absl::Status error = std::move(deferred_error_);
  deferred_error_ = absl::OkStatus();
  deferred_error_id_ = 0;
  return error;
}

absl::Status Connection::DrainLocked() {
  TG_RETURN_IF_ERROR(FlushWritesLocked());
  TG_RETURN_IF_ERROR(SendBatchLocked());
  while (!pending_.empty()) TG_RETURN_IF_ERROR(HandleReplyLocked());
  return TakeDeferredErrorLocked();
}

absl::Status Connection::WaitFor(uint64_t id) {
  absl::MutexLock lock(&mu_);
  if (batch_.has_batch() && batch_.batch().commands_size() > 0 &&
      batch_.batch().commands(0).id() <= id) {
    TG_RETURN_IF_ERROR(SendBatchLocked());
  }
  while (!pending_.empty() && pending_.front().id <= id) TG_RETURN_IF_ERROR(HandleReplyLocked());
  return TakeDeferredErrorLocked(id);
}

uint64_t Connection::last_sent_id() const {
  absl::MutexLock lock(&mu_);
  return next_id_ - 1;
}

bool Connection::has_queued_writes() const {
  absl::MutexLock lock(&mu_);
  return !queued_writes_.empty();
}

absl::StatusOr<Connection::Reply> Connection::Call(Request request) {
  TG_RETURN_IF_ERROR(WaitUploads());
  absl::MutexLock lock(&mu_);
  TG_ASSIGN_OR_RETURN(const uint64_t id, SendLocked(std::move(request), false));
  // An error of an earlier posted command wins, but this command's reply is still read so
  // that the stream stays in step.
  absl::Status earlier = DrainLocked();
  Reply reply;
  TG_RETURN_IF_ERROR(ReadOneLocked(&reply));
  if (reply.id() != id || reply.has_batch()) {
    broken_ = absl::InternalError(absl::StrFormat("rpc-server %s: reply %d out of order (want %d)",
                                                  endpoint_, reply.id(), id));
    return broken_;
  }
  TG_RETURN_IF_ERROR(earlier);
  TG_RETURN_IF_ERROR(ReplyStatus(reply));
  return reply;
}

absl::Status Connection::Post(Request request, ReplyHandler on_reply, uint64_t* id) {
  TG_RETURN_IF_ERROR(WaitUploads());
  absl::MutexLock lock(&mu_);
  TG_ASSIGN_OR_RETURN(const uint64_t sent, SendLocked(std::move(request), true));
  if (id != nullptr) *id = sent;
  pending_.push_back({sent, std::move(on_reply)});
  // Keep the reply queue short: the server's send window is finite.
  if (pending_.size() > 256) return DrainLocked();
  return absl::OkStatus();
}

absl::Status Connection::Drain() {
  TG_RETURN_IF_ERROR(WaitUploads());
  absl::MutexLock lock(&mu_);
  return DrainLocked();
}

absl::Status Connection::Upload(uint64_t buffer, uint64_t offset, const void* data, size_t size,
                                bool cacheable) {
  {
    absl::MutexLock lock(&mu_);
    if (!broken_.ok()) return broken_;
    // Commands posted earlier (a Clear of the same buffer) must land before these bytes.
    if (!pending_.empty() || !queued_writes_.empty()) TG_RETURN_IF_ERROR(DrainLocked());
  }
  ClearInlineOutputs();
  UploadJob job;
  job.buffer = buffer;
  job.offset = offset;
  job.bytes.assign(static_cast<const char*>(data), size);
  job.cacheable = cacheable;
  return uploads_->Add(std::move(job));
}

absl::Status Connection::WaitUploads() {
  return uploads_ == nullptr ? absl::OkStatus() : uploads_->Wait();
}

absl::StatusOr<UploadResult> Connection::UploadOne(const UploadJob& job) {
  grpc::ClientContext context;
  AddAuth(&context);
  auto stream = stub_->Upload(&context);
  pb::UploadMessage header;
  pb::UploadHeader* h = header.mutable_header();
  h->set_session_id(session_id_);
  h->set_buffer(job.buffer);
  h->set_offset(job.offset);
  h->set_size(job.bytes.size());
  if (job.cacheable) {
    const Sha256Digest digest = Sha256(job.bytes.data(), job.bytes.size());
    h->set_sha256(digest.data(), digest.size());
  }
  UploadResult result;
  pb::UploadReply reply;
  if (!stream->Write(header) || !stream->Read(&reply)) {
    return FromGrpc(stream->Finish(), endpoint_, "upload");
  }
  if (reply.have_it()) {
    result.skipped = job.bytes.size();
  } else {
    for (size_t pos = 0; pos < job.bytes.size(); pos += kChunkBytes) {
      pb::UploadMessage chunk;
      chunk.set_chunk(job.bytes.data() + pos, std::min(kChunkBytes, job.bytes.size() - pos));
      if (!stream->Write(chunk)) break;
    }
    result.sent = job.bytes.size();
  }
  stream->WritesDone();
  while (stream->Read(&reply)) {
  }
  grpc::Status s = stream->Finish();
  if (!s.ok()) {
    return FromGrpc(s, endpoint_, absl::StrFormat("upload of %d bytes", job.bytes.size()));
  }
  return result;
}

absl::Status Connection::Download(uint64_t buffer, uint64_t offset, void* data, size_t size) {
  TG_RETURN_IF_ERROR(Drain());
  grpc::ClientContext context;
  AddAuth(&context);
  pb::DownloadRequest request;
  request.set_session_id(session_id_);
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
  TG_RETURN_IF_ERROR(FromGrpc(stream->Finish(), endpoint_, "download"));
  if (got != size) {
    return absl::DataLossError(
        absl::StrFormat("rpc-server %s: download of %d bytes returned %d", endpoint_, size, got));
  }
  return absl::OkStatus();
}

bool Connection::MarkGraphSent(uint64_t key) {
  absl::MutexLock lock(&outputs_mu_);
  auto it = std::find(sent_graphs_.begin(), sent_graphs_.end(), key);
  const bool known = it != sent_graphs_.end();
  if (known) sent_graphs_.erase(it);
  sent_graphs_.push_back(key);
  if (sent_graphs_.size() > kRememberedGraphs) sent_graphs_.pop_front();
  return known;
}

void Connection::ForgetGraph(uint64_t key) {
  absl::MutexLock lock(&outputs_mu_);
  sent_graphs_.erase(std::remove(sent_graphs_.begin(), sent_graphs_.end(), key),
                     sent_graphs_.end());
}

bool Connection::ReadInlineOutput(uint64_t buffer, uint64_t offset, void* data, size_t size) {
  absl::MutexLock lock(&outputs_mu_);
  for (const InlineOutput& o : inline_outputs_) {
    if (o.buffer == buffer && RangeInside(offset, size, o.offset, o.bytes.size())) {
      std::memcpy(data, o.bytes.data() + (offset - o.offset), size);
      return true;
    }
  }
  return false;
}

void Connection::AddInlineOutput(uint64_t buffer, uint64_t offset, std::string bytes) {
  absl::MutexLock lock(&outputs_mu_);
  inline_outputs_.push_back({buffer, offset, std::move(bytes)});
}

void Connection::ClearInlineOutputs() {
  absl::MutexLock lock(&outputs_mu_);
  inline_outputs_.clear();
}

absl::StatusOr<std::string> Connection::PeerReadGrant(uint64_t buffer) {
  {
    absl::MutexLock lock(&mu_);
    auto it = grants_.find(buffer);
    if (it != grants_.end()) return it->second;
  }
  Request request;
  request.mutable_grant_peer_read()->set_buffer(buffer);
  TG_ASSIGN_OR_RETURN(Reply reply, Call(std::move(request)));
  absl::MutexLock lock(&mu_);
  grants_[buffer] = reply.grant().grant();
  return reply.grant().grant();
}

void Connection::ForgetBuffer(uint64_t buffer) {
  {
    absl::MutexLock lock(&mu_);
    grants_.erase(buffer);
  }
  absl::MutexLock lock(&outputs_mu_);
  inline_outputs_.erase(
      std::remove_if(inline_outputs_.begin(), inline_outputs_.end(),
                     [buffer](const InlineOutput& o) { return o.buffer == buffer; }),
      inline_outputs_.end());
}

}  // namespace tg::rpc
