#include "client/session_channel.h"

#include <grpcpp/grpcpp.h>

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/lost_endpoint.h"
#include "core/status_macros.h"
#include "proto/protocol.h"

namespace tg::rpc {

namespace {

// Reply bytes a command asks for (a read's range; a batch's reads).
size_t AskedBytes(const SessionChannel::Request& request) {
  if (request.has_read()) return request.read().range().size();
  size_t bytes = 0;
  if (request.has_batch()) {
    for (const auto& command : request.batch().commands()) bytes += AskedBytes(command);
  }
  return bytes;
}

// A Session the server refused because it is full, as the user needs to hear it: the
// numbers come from the refusal's trailing metadata (rpc::kServerFullSessionsKey), not from
// its message. Any other failure is returned as it is.
absl::Status ServerFull(const grpc::ClientContext& context, absl::string_view endpoint,
                        absl::Status read) {
  if (!absl::IsResourceExhausted(read)) return read;
  const auto& trailers = context.GetServerTrailingMetadata();
  auto number = [&](const char* key) -> std::optional<uint64_t> {
    auto it = trailers.find(key);
    uint64_t n = 0;
    if (it == trailers.end() ||
        !absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()), &n)) {
      return std::nullopt;
    }
    return n;
  };
  const std::optional<uint64_t> sessions = number(kServerFullSessionsKey);
  const std::optional<uint64_t> max_sessions = number(kServerFullMaxSessionsKey);
  if (!sessions.has_value() || !max_sessions.has_value()) return read;
  return absl::ResourceExhaustedError(absl::StrFormat(
      "rpc-server %s is full (%d sessions, --max-sessions %d); try again when a session there "
      "ends, or raise its --max-sessions",
      endpoint, *sessions, *max_sessions));
}

}  // namespace

SessionChannel::SessionChannel(std::unique_ptr<grpc::ClientContext> context, std::string endpoint,
                               const CallDeadlines* deadlines)
    : endpoint_(std::move(endpoint)),
      own_deadlines_(deadlines == nullptr ? std::make_unique<CallDeadlines>() : nullptr),
      deadlines_(deadlines == nullptr ? own_deadlines_.get() : deadlines),
      context_(std::move(context)),
      read_watchdog_([this] { context_->TryCancel(); }),
      write_watchdog_([this] { context_->TryCancel(); }) {}

absl::StatusOr<std::unique_ptr<SessionChannel>> SessionChannel::Open(
    tensorgrid::v1::TensorGrid::Stub& stub, std::unique_ptr<grpc::ClientContext> context,
    std::string endpoint, const CallDeadlines* deadlines) {
  std::unique_ptr<SessionChannel> c(
      new SessionChannel(std::move(context), std::move(endpoint), deadlines));
  absl::MutexLock lock(&c->mu_);
  c->stream_ = stub.Session(c->context_.get());
  Reply started;
  if (absl::Status read = c->ReadLocked(&started); !read.ok()) {
    return ServerFull(*c->context_, c->endpoint_, std::move(read));
  }
  if (started.code() != 0 || !started.has_started()) {
    const int code =
        started.code() != 0 ? started.code() : static_cast<int>(absl::StatusCode::kInternal);
    return absl::Status(
        static_cast<absl::StatusCode>(code),
        absl::StrCat("rpc-server ", c->endpoint_, ": session refused: ", started.message()));
  }
  c->session_id_ = started.started().session_id();
  return c;
}

SessionChannel::~SessionChannel() {
  absl::MutexLock lock(&mu_);
  if (stream_ == nullptr || !broken_.ok()) return;
  DrainLocked().IgnoreError();
  if (!broken_.ok()) return;
  read_watchdog_.Arm(deadlines_->ForTransfer(0));  // a stalled server never sends its status.
  stream_->WritesDone();
  stream_->Finish().ok();
  read_watchdog_.Disarm();
}

absl::Status SessionChannel::ReplyStatus(const Reply& reply) const {
  if (reply.code() == 0) return absl::OkStatus();
  // A server that lost a peer says which in lost_endpoint (its message names it for people).
  return WithLostEndpoint(
      absl::Status(static_cast<absl::StatusCode>(reply.code()),
                   absl::StrCat("rpc-server ", endpoint_, ": ", reply.message())),
      reply.lost_endpoint());
}

absl::Status SessionChannel::BrokenLocked(absl::string_view what) {
  // The stream has ended (or a watchdog cancelled it), so a read in progress ends soon; it
  // may find the cause first.
  mu_.Await(absl::Condition(this, &SessionChannel::NotReading));
  if (!broken_.ok()) return broken_;
  grpc::Status s = stream_->Finish();
  if (stalled_after_ > absl::ZeroDuration()) {
    broken_ = absl::DeadlineExceededError(absl::StrFormat(
        "rpc-server %s is stalled (%s): nothing for %s, the most this client allows (%s); "
        "the server is treated as lost",
        endpoint_, what, absl::FormatDuration(stalled_after_),
        deadlines_->ExplainCommands(in_flight_bytes_)));
    SetLostEndpoint(broken_, endpoint_);
    return broken_;
  }
  std::string detail = s.ok() ? "the stream ended" : s.error_message();
  const auto code = s.ok() || s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                            s.error_code() == grpc::StatusCode::CANCELLED
                        ? absl::StatusCode::kUnavailable
                        : static_cast<absl::StatusCode>(s.error_code());
  broken_ = WithLostEndpoint(
      absl::Status(code, absl::StrCat("rpc-server ", endpoint_, " is gone (", what, "): ", detail)),
      endpoint_);
  return broken_;
}

absl::Status SessionChannel::OutOfOrderLocked(uint64_t got, absl::string_view want) {
  broken_ = absl::InternalError(
      absl::StrFormat("rpc-server %s: reply %d out of order (want %s)", endpoint_, got, want));
  return broken_;
}

// ---- Sending ----

absl::StatusOr<uint64_t> SessionChannel::WriteLocked(Request request, bool may_batch) {
  const uint64_t id = next_id_++;
  request.set_id(id);
  if (batch_depth_ > 0 && may_batch) {
    const size_t bytes = request.ByteSizeLong();
    if (bytes <= kMaxBatchBytes) {
      if (batch_bytes_ + bytes > kMaxBatchBytes) TG_RETURN_IF_ERROR(SendBatchLocked());
      *batch_.mutable_batch()->add_commands() = std::move(request);
      batch_bytes_ += bytes;
      if (batch_.batch().commands_size() >= kMaxBatchCommands) {
        TG_RETURN_IF_ERROR(SendBatchLocked());
      }
      return id;
    }
  }
  TG_RETURN_IF_ERROR(SendBatchLocked());
  if (!WriteStreamLocked(request)) return BrokenLocked("write failed");
  return id;
}

absl::Status SessionChannel::SendBatchLocked() {
  if (!batch_.has_batch() || batch_.batch().commands_size() == 0) return absl::OkStatus();
  // One held command goes as itself: the server need not unpack a batch of one.
  const bool written = batch_.batch().commands_size() == 1
                           ? WriteStreamLocked(batch_.batch().commands(0))
                           : WriteStreamLocked(batch_);
  batch_.Clear();
  batch_bytes_ = 0;
  if (!written) return BrokenLocked("write failed");
  return absl::OkStatus();
}

absl::Status SessionChannel::FlushWritesLocked() {
  for (Request& write : queued_.TakeAsCommands()) {
    TG_ASSIGN_OR_RETURN(const uint64_t id, WriteLocked(std::move(write), true));
    pending_.push_back({id, nullptr});
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> SessionChannel::SendLocked(Request request, bool may_batch) {
  if (!broken_.ok()) return broken_;
  if (request.has_compute()) {
    // The queued writes into the device's memory are the graph's inputs: they travel in the
    // same message. Those of other devices wait for their own (their buffers are not this
    // graph's, and riding here would hold their devices' queues on the server for it).
    queued_.MoveInto(*request.mutable_compute());
  } else {
    TG_RETURN_IF_ERROR(FlushWritesLocked());
  }
  return WriteLocked(std::move(request), may_batch);
}

void SessionChannel::BeginBatch() {
  absl::MutexLock lock(&mu_);
  ++batch_depth_;
}

absl::Status SessionChannel::EndBatch() {
  absl::MutexLock lock(&mu_);
  if (batch_depth_ > 0 && --batch_depth_ > 0) return absl::OkStatus();
  if (!broken_.ok()) return broken_;
  return SendBatchLocked();
}

absl::Status SessionChannel::QueueWrite(uint32_t device, uint64_t buffer, uint64_t offset,
                                        const void* data, size_t size) {
  absl::MutexLock lock(&mu_);
  if (!broken_.ok()) return broken_;
  if (queued_.bytes() + size > QueuedWrites::kMaxBytes) TG_RETURN_IF_ERROR(FlushWritesLocked());
  queued_.Add(device, buffer, offset, data, size);
  return absl::OkStatus();
}

// ---- Replies ----

bool SessionChannel::WriteStreamLocked(const Request& message) {
  in_flight_bytes_ += message.ByteSizeLong() + AskedBytes(message);
  const absl::Duration limit = deadlines_->ForCommands(in_flight_bytes_);
  write_watchdog_.Arm(limit);
  ++messages_sent_;
  const bool written = stream_->Write(message);
  if (write_watchdog_.Disarm()) {
    stalled_after_ = limit;
    return false;
  }
  return written;
}

absl::Status SessionChannel::ReadLocked(Reply* reply) {
  reading_ = true;
  const absl::Duration limit = deadlines_->ForCommands(in_flight_bytes_);
  Stream* stream = stream_.get();
  read_watchdog_.Arm(limit);
  mu_.Unlock();
  const bool read = stream->Read(reply);
  mu_.Lock();
  reading_ = false;
  if (read_watchdog_.Disarm()) {
    stalled_after_ = limit;
    return BrokenLocked("waiting for a reply");
  }
  if (!read) return BrokenLocked("read failed");
  return absl::OkStatus();
}

absl::Status SessionChannel::HandleReplyLocked() {
  if (!broken_.ok()) return broken_;
  if (reading_) {
    mu_.Await(absl::Condition(this, &SessionChannel::NotReading));
    return absl::OkStatus();
  }
  Reply reply;
  TG_RETURN_IF_ERROR(ReadLocked(&reply));
  if (!reply.has_batch()) return HandleOneReplyLocked(reply);
  for (Reply& one : *reply.mutable_batch()->mutable_replies()) {
    TG_RETURN_IF_ERROR(HandleOneReplyLocked(one));
  }
  return absl::OkStatus();
}

absl::Status SessionChannel::HandleOneReplyLocked(Reply& reply) {
  if (pending_.empty() || reply.id() != pending_.front().id) {
    return OutOfOrderLocked(reply.id(),
                            pending_.empty() ? "none" : absl::StrCat(pending_.front().id));
  }
  Pending p = std::move(pending_.front());
  pending_.pop_front();
  if (pending_.empty()) in_flight_bytes_ = 0;
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

absl::Status SessionChannel::TakeDeferredErrorLocked(uint64_t up_to) {
  if (deferred_error_id_ > up_to) return absl::OkStatus();
  absl::Status error = std::move(deferred_error_);
  deferred_error_ = absl::OkStatus();
  deferred_error_id_ = 0;
  return error;
}

absl::Status SessionChannel::DrainLocked() {
  TG_RETURN_IF_ERROR(FlushWritesLocked());
  TG_RETURN_IF_ERROR(SendBatchLocked());
  // What other threads post while this one waits is theirs to wait for.
  return WaitForLocked(next_id_ - 1);
}

absl::Status SessionChannel::WaitForLocked(uint64_t id) {
  if (batch_.has_batch() && batch_.batch().commands_size() > 0 &&
      batch_.batch().commands(0).id() <= id) {
    TG_RETURN_IF_ERROR(SendBatchLocked());
  }
  while (!pending_.empty() && pending_.front().id <= id) TG_RETURN_IF_ERROR(HandleReplyLocked());
  return TakeDeferredErrorLocked(id);
}

// ---- Waiting ----

absl::StatusOr<SessionChannel::Reply> SessionChannel::Call(Request request, uint64_t* id) {
  absl::MutexLock lock(&mu_);
  TG_ASSIGN_OR_RETURN(const uint64_t sent, SendLocked(std::move(request), false));
  if (id != nullptr) *id = sent;
  // Whoever reads the reply (this thread or another waiter) hands it over. An error of an
  // earlier posted command wins (the first error up to `sent` is the one returned).
  auto reply = std::make_shared<Reply>();
  pending_.push_back({sent, [reply](Reply& r) {
                        *reply = std::move(r);
                        return absl::OkStatus();
                      }});
  TG_RETURN_IF_ERROR(WaitForLocked(sent));
  return std::move(*reply);
}

absl::Status SessionChannel::Post(Request request, ReplyHandler on_reply, uint64_t* id) {
  absl::MutexLock lock(&mu_);
  TG_ASSIGN_OR_RETURN(const uint64_t sent, SendLocked(std::move(request), true));
  if (id != nullptr) *id = sent;
  pending_.push_back({sent, std::move(on_reply)});
  // Inside a batch nothing is waited for: a command sent before (or a full batch sent on
  // its own) may need what another server gets in a batch still held on this thread (a meta
  // stream's steps queued ahead), and that server would wait as long as this thread. The
  // batch's end sends it, and the next wait reads the replies.
  if (pending_.size() <= kMaxPendingReplies || batch_depth_ > 0) return absl::OkStatus();
  return DrainLocked();
}

absl::Status SessionChannel::Drain() {
  absl::MutexLock lock(&mu_);
  return DrainLocked();
}

absl::Status SessionChannel::Flush() {
  absl::MutexLock lock(&mu_);
  if (!broken_.ok()) return broken_;
  TG_RETURN_IF_ERROR(FlushWritesLocked());
  return SendBatchLocked();
}

absl::Status SessionChannel::DrainIfBusy() {
  absl::MutexLock lock(&mu_);
  if (!broken_.ok()) return broken_;
  if (pending_.empty() && queued_.empty()) return absl::OkStatus();
  return DrainLocked();
}

absl::Status SessionChannel::WaitFor(uint64_t id) {
  absl::MutexLock lock(&mu_);
  return WaitForLocked(id);
}

uint64_t SessionChannel::last_sent_id() const {
  absl::MutexLock lock(&mu_);
  return next_id_ - 1;
}

uint64_t SessionChannel::messages_sent() const {
  absl::MutexLock lock(&mu_);
  return messages_sent_;
}

bool SessionChannel::has_queued_writes() const {
  absl::MutexLock lock(&mu_);
  return !queued_.empty();
}

bool SessionChannel::has_queued_writes_for(uint32_t device) const {
  absl::MutexLock lock(&mu_);
  return queued_.HasFor(device);
}

size_t SessionChannel::queued_write_bytes() const {
  absl::MutexLock lock(&mu_);
  return queued_.bytes();
}

}  // namespace tg::rpc
