#include "server/session.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/context.h"
#include "core/status_macros.h"
#include "proto/protocol.h"
#include "server/blob_cache.h"
#include "server/collective_runner.h"
#include "server/grant_table.h"
#include "server/log.h"
#include "server/memory_reservation.h"
#include "server/metrics.h"
#include "server/model_index.h"
#include "server/peer_client.h"
#include "server/peer_pushes.h"
#include "server/random_id.h"

namespace tg::server {
namespace {

namespace pb = ::tensorgrid::v1;

absl::Status CheckInline(uint64_t size, const char* what) {
  if (size > rpc::kMaxInlineBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s of %d bytes exceeds the inline limit of %d (use Upload/Download)", what,
                        size, rpc::kMaxInlineBytes));
  }
  return absl::OkStatus();
}

// The rows a WriteRows/ReadRows names, packed on the wire; the packed size checked against
// the inline limit (and, for a write, against the bytes that came).
absl::StatusOr<StridedRange> WireRows(const pb::Rows& rows, const char* what) {
  StridedRange r;
  r.offset = rows.offset();
  r.row_size = rows.row_size();
  r.n_rows = rows.n_rows();
  r.stride = rows.stride();
  TG_ASSIGN_OR_RETURN(const size_t packed, PackedBytes(r));
  TG_RETURN_IF_ERROR(CheckInline(packed, what));
  return r;
}

absl::StatusOr<uint8_t> ByteValue(uint32_t value) {
  if (value > 255) {
    return absl::InvalidArgumentError(absl::StrFormat("byte value %d is not in 0..255", value));
  }
  return static_cast<uint8_t>(value);
}

// See log_id().
constexpr size_t kLoggedIdChars = 8;

// What a buffer of `size` bytes is charged against the session limit and the server budget.
uint64_t BufferCharge(uint64_t size) { return std::max(size, kMinBufferCharge); }

// The answer to a command of a cancelled session.
absl::Status CancelledStatus() {
  return absl::CancelledError("session cancelled (the client went away or the session ended)");
}

// One lane per distinct device: indices that name the same Device share its lane, since
// its buffers may then be used by either index's commands.
std::vector<int> LanesOf(const std::vector<Device*>& devices) {
  std::vector<int> lanes(devices.size());
  for (size_t i = 0; i < devices.size(); ++i) {
    lanes[i] = static_cast<int>(i);
    for (size_t j = 0; j < i; ++j) {
      if (devices[j] == devices[i]) {
        lanes[i] = lanes[j];
        break;
      }
    }
  }
  return lanes;
}

}  // namespace

Session::Session(std::string id, SessionEnv env)
    : id_(std::move(id)),
      env_(std::move(env)),
      handle_key_(env_.predictable_handles ? 0 : RandomU64()),
      handle_mult_(env_.predictable_handles ? 1 : RandomU64() | 1),
      lane_of_(LanesOf(env_.devices)),
      streams_(env_.devices.size()),
      progress_(std::make_shared<CommandProgress>()),
      lanes_(static_cast<int>(env_.devices.size())) {}

Session::~Session() { Close(); }

void Session::Cancel() { cancelled_.store(true); }

bool Session::cancelled() const {
  if (cancelled_.load()) return true;
  // Once cancelled, the hook is never asked again (its stream may be gone by then).
  if (env_.abandoned && env_.abandoned()) {
    cancelled_.store(true);
    return true;
  }
  return false;
}

bool Session::AddStream(std::weak_ptr<CancellableStream> stream) {
  absl::MutexLock lock(&streams_mu_);
  if (closed_) return false;
  // Streams that ended are dropped as new ones come, so the list stays as long as the
  // streams open (twice at most).
  if (streams_in_flight_.size() >= 64 &&
      streams_in_flight_.size() == streams_in_flight_.capacity()) {
    std::erase_if(streams_in_flight_,
                  [](const std::weak_ptr<CancellableStream>& w) { return w.expired(); });
  }
  streams_in_flight_.push_back(std::move(stream));
  return true;
}

void Session::Close() {
  Cancel();
  lanes_.Drain();      // nothing may run on what goes below.
  progress_->Close();  // peers waiting for a command of ours stop waiting.
  std::vector<std::weak_ptr<CancellableStream>> streams;
  {
    absl::MutexLock lock(&streams_mu_);
    closed_ = true;
    streams.swap(streams_in_flight_);
  }
  const absl::Status ended = absl::CancelledError("the session ended (its stream closed)");
  for (const auto& w : streams) {
    if (std::shared_ptr<CancellableStream> s = w.lock()) s->Cancel(ended);
  }
  absl::MutexLock lock(&handle_mu_);
  graphs_.clear();  // they point into the buffers.
  streams_.clear();
  if (env_.grants != nullptr) {
    for (const auto& [handle, grant] : grants_) env_.grants->Revoke(grant);
  }
  grants_.clear();
  // Revoking dropped the pieces peers delivered for the grants; nothing reaches us after this.
  if (mailbox_ != nullptr) mailbox_->Close();
  absl::flat_hash_map<uint64_t, std::shared_ptr<SessionBuffer>> buffers;
  {
    absl::MutexLock table_lock(&table_mu_);
    buffers.swap(buffers_);
  }
  // Their charges go back as Free gives them back (to the server's budget above all).
  for (const auto& [handle, buf] : buffers) ReleaseMemory(BufferCharge(buf->size()));
  if (buffers.empty()) return;
  // Outside the lock: destructors report to metrics. Streams hold buffers weakly, so the
  // memory goes here, unless a peer's PeerCopy is reading it this moment.
  buffers.clear();
  ReleaseFreedHostMemory();  // what the session freed (also by Free before) goes back now.
}

std::string Session::log_id() const { return id_.substr(0, kLoggedIdChars); }

uint64_t Session::NextHandle() {
  // A bijection of a counter keyed per session: unique, opaque, never an address.
  for (;;) {
    uint64_t x = (next_handle_++ ^ handle_key_) * handle_mult_;
    x ^= x >> 29;
    if (x != 0 && !buffers_.contains(x)) return x;
  }
}

absl::StatusOr<std::shared_ptr<SessionBuffer>> Session::FindBuffer(uint64_t handle) const {
  absl::MutexLock lock(&table_mu_);
  auto it = handle == 0 ? buffers_.end() : buffers_.find(handle);
  if (it == buffers_.end()) {
    return absl::NotFoundError(
        absl::StrFormat("no buffer with handle %#x in this session", handle));
  }
  return it->second;
}

size_t Session::buffer_count() const {
  absl::MutexLock lock(&table_mu_);
  return buffers_.size();
}

absl::StatusOr<Device*> Session::DeviceAt(uint32_t index) const {
  if (index >= env_.devices.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "device %d does not exist (this server has %d)", index, env_.devices.size()));
  }
  return env_.devices[index];
}

absl::StatusOr<Stream*> Session::StreamFor(uint32_t device) {
  TG_ASSIGN_OR_RETURN(Device * d, DeviceAt(device));
  std::unique_ptr<Stream>& stream = streams_[device];
  if (stream == nullptr) {
    TG_ASSIGN_OR_RETURN(stream, d->CreateStream());
  }
  return stream.get();
}

void Session::Finish(const pb::SessionRequest& command, const absl::Status& status,
                     pb::SessionReply* reply) const {
  if (!status.ok()) {
    if (LogEnabled(LogLevel::kDebug)) {
      kServerLog.Debug("command failed", {{"session", log_id()},
                                          {"request", command.id()},
                                          {"command", static_cast<int>(command.command_case())},
                                          {"code", absl::StatusCodeToString(status.code())},
                                          {"error", status.message()}});
    }
    reply->clear_result();
    reply->set_code(static_cast<int32_t>(status.code()));
    reply->set_message(std::string(status.message()));
  }
  if (env_.metrics != nullptr) env_.metrics->Request(static_cast<int>(status.code()));
}

void Session::Dispatch(std::shared_ptr<const pb::SessionRequest> message,
                       const pb::SessionRequest& command, ReplySequencer* replies,
                       ReplySequencer::Group* group, int i) {
  pb::SessionReply reply;
  reply.set_id(command.id());
  absl::StatusOr<Work> work = command.id() == 0
                                  ? absl::InvalidArgumentError("request id must be > 0")
                              : cancelled() ? CancelledStatus()
                                            : Prepare(command, &reply);
  if (!work.ok() || work->lanes.empty() || !parallel_) {
    // Done by its checks, or a one-device session: no hand-off.
    const absl::Status status = work.ok() && work->run ? work->run(&reply) : work.status();
    Finish(command, status, &reply);
    replies->Fill(group, i, std::move(reply));
    return;
  }
  std::vector<int> lanes = std::move(work->lanes);
  lanes_.Submit(std::move(lanes), [this, message = std::move(message), &command, replies, group, i,
                                   run = std::move(work->run), reply = std::move(reply)]() mutable {
    // A session cancelled meanwhile skips what is queued: it is answered, not run.
    const absl::Status status = cancelled() ? CancelledStatus() : run(&reply);
    run = nullptr;  // the buffers it held go before the reply says the command is done.
    Finish(command, status, &reply);
    replies->Fill(group, i, std::move(reply));
  });
}

absl::Status CheckBatchSize(uint64_t commands) {
  if (commands <= static_cast<uint64_t>(kMaxBatchCommands)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("batch of %d commands exceeds the cap of %d per batch; send several batches",
                      commands, kMaxBatchCommands));
}

void Session::Post(std::shared_ptr<const pb::SessionRequest> request, ReplySequencer* replies) {
  if (request->has_batch()) {
    // Refused whole, before any command is queued.
    if (absl::Status s = CheckBatchSize(request->batch().commands_size()); !s.ok()) {
      return Refuse(request->id(), s, replies);
    }
  }
  // The message stays held until its last command has run: counted while it is queued.
  const uint64_t bytes = request->SpaceUsedLong();
  WaitForQueueRoom(bytes);
  struct Queued {
    Queued(std::shared_ptr<const pb::SessionRequest> r, Session* s, uint64_t n)
        : request(std::move(r)), session(s), bytes(n) {}
    Queued(const Queued&) = delete;
    Queued& operator=(const Queued&) = delete;
    ~Queued() { session->Dequeued(bytes); }
    const std::shared_ptr<const pb::SessionRequest> request;
    Session* const session;
    const uint64_t bytes;
  };
  auto queued = std::make_shared<Queued>(std::move(request), this, bytes);
  // Shares the count's lifetime: the bytes go back when the last task lets go of it.
  std::shared_ptr<const pb::SessionRequest> held(queued, queued->request.get());
  absl::MutexLock lock(&handle_mu_);
  if (!held->has_batch()) {
    ReplySequencer::Group* group = replies->Open(held->id(), /*batch=*/false, 1);
    Dispatch(held, *held, replies, group, 0);
    return;
  }
  const auto& commands = held->batch().commands();
  ReplySequencer::Group* group = replies->Open(held->id(), /*batch=*/true, commands.size());
  for (int i = 0; i < commands.size();) {
    const int n = PullRun(*held, i);
    if (n > 1) {
      DispatchPulls(held, i, n, replies, group);
    } else {
      Dispatch(held, commands[i], replies, group, i);
    }
    i += std::max(n, 1);
  }
}

void Session::Refuse(uint64_t id, const absl::Status& status, ReplySequencer* replies) {
  pb::SessionRequest request;
  request.set_id(id);
  pb::SessionReply reply;
  reply.set_id(id);
  absl::MutexLock lock(&handle_mu_);
  ReplySequencer::Group* group = replies->Open(id, /*batch=*/false, 1);
  Finish(request, status, &reply);
  replies->Fill(group, 0, std::move(reply));
}

void Session::WaitForQueueRoom(uint64_t bytes) {
  absl::MutexLock lock(&queue_mu_);
  auto room = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_) {
    return queued_bytes_ == 0 || queued_bytes_ + bytes <= kMaxQueuedRequestBytes || cancelled();
  };
  // Polled now and then too: cancelled() may turn true without anyone signalling.
  while (!room()) queue_mu_.AwaitWithTimeout(absl::Condition(&room), absl::Milliseconds(100));
  queued_bytes_ += bytes;
}

void Session::Dequeued(uint64_t bytes) {
  absl::MutexLock lock(&queue_mu_);
  queued_bytes_ -= bytes;
}

int Session::PullRun(const pb::SessionRequest& batch, int first) const {
  const auto& commands = batch.batch().commands();
  int n = 0;
  while (first + n < commands.size() && n < kMaxPullsAtOnce) {
    const pb::SessionRequest& c = commands[first + n];
    if (!c.has_peer_pull() || c.id() == 0) break;
    const pb::PeerPull& p = c.peer_pull();
    // Pulls into overlapping bytes keep their order (the later one wins).
    for (int k = first; k < first + n; ++k) {
      const pb::PeerPull& q = commands[k].peer_pull();
      if (q.dst_buffer() == p.dst_buffer() && q.dst_offset() < p.dst_offset() + p.size() &&
          p.dst_offset() < q.dst_offset() + q.size()) {
        return n;
      }
    }
    ++n;
  }
  return n;
}

void Session::DispatchPulls(std::shared_ptr<const pb::SessionRequest> message, int first, int n,
                            ReplySequencer* replies, ReplySequencer::Group* group) {
  struct Pull {
    const pb::SessionRequest* command;
    int slot;
    pb::SessionReply reply;
    Work work;
  };
  std::vector<Pull> pulls;
  std::vector<int> lanes;
  for (int i = first; i < first + n; ++i) {
    const pb::SessionRequest& command = message->batch().commands(i);
    pb::SessionReply reply;
    reply.set_id(command.id());
    absl::StatusOr<Work> work = Prepare(command, &reply);
    if (!work.ok()) {
      Finish(command, work.status(), &reply);
      replies->Fill(group, i, std::move(reply));
      continue;
    }
    lanes.insert(lanes.end(), work->lanes.begin(), work->lanes.end());
    pulls.push_back({&command, i, std::move(reply), *std::move(work)});
  }
  if (pulls.empty()) return;
  // Each pull waits on its peer, not on the others: all at once, each on its own thread.
  auto run = [this, message = std::move(message), replies, group,
              pulls = std::move(pulls)]() mutable {
    std::vector<absl::Status> status(pulls.size());
    if (cancelled()) {
      for (size_t k = 0; k < pulls.size(); ++k) {
        pulls[k].work.run = nullptr;
        Finish(*pulls[k].command, CancelledStatus(), &pulls[k].reply);
        replies->Fill(group, pulls[k].slot, std::move(pulls[k].reply));
      }
      return;
    }
    std::vector<std::thread> threads;
    for (size_t k = 1; k < pulls.size(); ++k) {
      threads.emplace_back([&, k] { status[k] = pulls[k].work.run(&pulls[k].reply); });
    }
    status[0] = pulls[0].work.run(&pulls[0].reply);
    for (std::thread& t : threads) t.join();
    for (size_t k = 0; k < pulls.size(); ++k) {
      pulls[k].work.run = nullptr;
      Finish(*pulls[k].command, status[k], &pulls[k].reply);
      replies->Fill(group, pulls[k].slot, std::move(pulls[k].reply));
    }
  };
  if (!parallel_) {
    run();
  } else {
    lanes_.Submit(std::move(lanes), std::move(run));
  }
}

void Session::Quiesce() { lanes_.Drain(); }

pb::SessionReply Session::Handle(const pb::SessionRequest& request) {
  pb::SessionReply out;
  ReplySequencer replies(
      [&](const pb::SessionReply& reply) {
        out = reply;
        return true;
      },
      progress_.get());
  auto message = std::make_shared<const pb::SessionRequest>(request);
  {
    absl::MutexLock lock(&handle_mu_);
    // Even a batch is one command here, which Prepare refuses.
    Dispatch(message, *message, &replies, replies.Open(request.id(), /*batch=*/false, 1), 0);
  }
  replies.WaitSent();
  return out;
}

bool Session::Serve(const pb::SessionRequest& request,
                    absl::FunctionRef<bool(const pb::SessionReply&)> send) {
  ReplySequencer replies([&](const pb::SessionReply& reply) { return send(reply); },
                         progress_.get());
  Post(std::make_shared<const pb::SessionRequest>(request), &replies);
  replies.WaitSent();
  return replies.ok();
}

Session::Work Session::OnLaneOf(const SessionBuffer& buf,
                                absl::AnyInvocable<absl::Status(pb::SessionReply*)> run) const {
  Work work;
  work.lanes.push_back(lane_of_[buf.device_index()]);
  work.run = std::move(run);
  return work;
}

absl::StatusOr<Session::Work> Session::PreparePush(const pb::PeerPush& p) {
  // Without a PeerClient the checks still run and Send answers UNIMPLEMENTED.
  if (env_.pushes == nullptr) return absl::UnimplementedError("peer_push is not enabled");
  TG_RETURN_IF_ERROR(PeerPushes::Check(p));
  // The pieces are read on the lanes of their buffers: after the work queued there.
  Work work;
  std::vector<std::shared_ptr<SessionBuffer>> sources;
  for (const pb::PushPiece& piece : p.pieces()) {
    TG_ASSIGN_OR_RETURN(auto src, FindBuffer(piece.buffer()));
    TG_RETURN_IF_ERROR(src->CheckRange(piece.offset(), piece.size()));
    work.lanes.push_back(lane_of_[src->device_index()]);
    sources.push_back(std::move(src));
  }
  PeerPushes* pushes = env_.pushes;
  work.run = [pushes, sources = std::move(sources), &p](pb::SessionReply*) {
    return pushes->Send(p, sources);
  };
  return work;
}

absl::StatusOr<Session::Work> Session::Prepare(const pb::SessionRequest& req,
                                               pb::SessionReply* reply) {
  switch (req.command_case()) {
    case pb::SessionRequest::kAllocBuffer:
      TG_RETURN_IF_ERROR(Alloc(req.alloc_buffer(), reply->mutable_alloc_buffer()));
      return Work{};
    case pb::SessionRequest::kFreeBuffer:
      TG_RETURN_IF_ERROR(Free(req.free_buffer().buffer()));
      return Work{};
    case pb::SessionRequest::kClearBuffer: {
      TG_ASSIGN_OR_RETURN(uint8_t value, ByteValue(req.clear_buffer().value()));
      TG_ASSIGN_OR_RETURN(auto buf, FindBuffer(req.clear_buffer().buffer()));
      return OnLaneOf(
          *buf, [buf, value](pb::SessionReply*) { return buf->Memset(0, value, buf->size()); });
    }
    case pb::SessionRequest::kWrite: {
      const pb::WriteRange& w = req.write();
      TG_RETURN_IF_ERROR(CheckInline(w.data().size(), "write"));
      TG_ASSIGN_OR_RETURN(auto buf, FindBuffer(w.buffer()));
      return OnLaneOf(*buf, [buf, &w](pb::SessionReply*) {
        return buf->Write(w.offset(), w.data().data(), w.data().size());
      });
    }
    case pb::SessionRequest::kRead: {
      const pb::Range& r = req.read().range();
      TG_RETURN_IF_ERROR(CheckInline(r.size(), "read"));
      TG_ASSIGN_OR_RETURN(auto buf, FindBuffer(r.buffer()));
      TG_RETURN_IF_ERROR(buf->CheckRange(r.offset(), r.size()));
      return OnLaneOf(*buf, [buf, &r](pb::SessionReply* reply) {
        std::string* data = reply->mutable_read()->mutable_data();
        data->resize(r.size());
        return buf->Read(r.offset(), data->data(), r.size());
      });
    }
    case pb::SessionRequest::kWriteRows: {
      const pb::WriteRows& w = req.write_rows();
      TG_RETURN_IF_ERROR(CheckInline(w.data().size(), "write_rows"));
      TG_ASSIGN_OR_RETURN(const StridedRange r, WireRows(w.rows(), "write_rows"));
      if (w.data().size() != r.n_rows * r.row_size) {
        return absl::InvalidArgumentError(
            absl::StrFormat("write_rows carries %d bytes for %d rows of %d bytes (%d packed)",
                            w.data().size(), r.n_rows, r.row_size, r.n_rows * r.row_size));
      }
      TG_ASSIGN_OR_RETURN(auto buf, FindBuffer(w.rows().buffer()));
      return OnLaneOf(
          *buf, [buf, r, &w](pb::SessionReply*) { return buf->WriteRows(r, w.data().data()); });
    }
    case pb::SessionRequest::kReadRows: {
      TG_ASSIGN_OR_RETURN(const StridedRange r, WireRows(req.read_rows().rows(), "read_rows"));
      TG_ASSIGN_OR_RETURN(auto buf, FindBuffer(req.read_rows().rows().buffer()));
      TG_RETURN_IF_ERROR(buf->CheckRows(r));
      return OnLaneOf(*buf, [buf, r](pb::SessionReply* reply) {
        std::string* data = reply->mutable_read()->mutable_data();
        data->resize(r.n_rows * r.row_size);
        return buf->ReadRows(r, data->data());
      });
    }
    case pb::SessionRequest::kMemset: {
      const pb::Range& r = req.memset().range();
      TG_ASSIGN_OR_RETURN(uint8_t value, ByteValue(req.memset().value()));
      TG_ASSIGN_OR_RETURN(auto buf, FindBuffer(r.buffer()));
      return OnLaneOf(*buf, [buf, &r, value](pb::SessionReply*) {
        return buf->Memset(r.offset(), value, r.size());
      });
    }
    case pb::SessionRequest::kCopy: {
      const pb::CopyRange& c = req.copy();
      TG_ASSIGN_OR_RETURN(auto src, FindBuffer(c.src().buffer()));
      TG_ASSIGN_OR_RETURN(auto dst, FindBuffer(c.dst_buffer()));
      // Between two devices: both lanes, so that it follows the work of each; a source the
      // client knows is ready is read beside its device's later work, on dst's lane only.
      Work work = OnLaneOf(*dst, [src, dst, &c](pb::SessionReply*) {
        return SessionBuffer::Copy(*src, c.src().offset(), *dst, c.dst_offset(), c.src().size());
      });
      if (!c.src_ready()) work.lanes.push_back(lane_of_[src->device_index()]);
      return work;
    }
    case pb::SessionRequest::kCompute:
      return PrepareCompute(req.compute());
    case pb::SessionRequest::kGrantPeerRead:
      TG_RETURN_IF_ERROR(Grant(req.grant_peer_read().buffer(), reply->mutable_grant()));
      return Work{};
    case pb::SessionRequest::kPeerPull: {
      const pb::PeerPull& p = req.peer_pull();
      if (env_.peers == nullptr) return absl::UnimplementedError("peer_pull is not enabled");
      TG_ASSIGN_OR_RETURN(auto dst, FindBuffer(p.dst_buffer()));
      PeerClient* peers = env_.peers;
      return OnLaneOf(*dst, [peers, dst, &p](pb::SessionReply*) {
        return peers->Pull(p.endpoint(), p.grant(), p.src_offset(), p.size(), *dst, p.dst_offset(),
                           p.after());
      });
    }
    case pb::SessionRequest::kPeerPush:
      return PreparePush(req.peer_push());
    case pb::SessionRequest::kAwaitPush: {
      const pb::AwaitPush& a = req.await_push();
      if (env_.pushes == nullptr) return absl::UnimplementedError("await_push is not enabled");
      TG_ASSIGN_OR_RETURN(auto dst, FindBuffer(a.dst_buffer()));
      TG_RETURN_IF_ERROR(dst->CheckRange(a.dst_offset(), a.size()));
      auto grant = grants_.find(a.dst_buffer());
      if (grant == grants_.end()) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "await_push: buffer %d has no peer grant, which names its pieces (GrantPeerRead it "
            "first)",
            a.dst_buffer()));
      }
      PeerPushes* pushes = env_.pushes;
      return OnLaneOf(*dst, [pushes, dst, grant = grant->second, &a](pb::SessionReply*) {
        return pushes->Await(a, grant, *dst);
      });
    }
    case pb::SessionRequest::kAllReduce: {
      if (env_.collectives == nullptr) return absl::UnimplementedError("all_reduce is not enabled");
      const pb::AllReduce& a = req.all_reduce();
      // The server's part reads every local tensor of the collective: it waits for the work
      // queued on each of their devices and holds back what comes after.
      Work work;
      for (const pb::CollectiveTensor& t : a.tensors()) {
        TG_ASSIGN_OR_RETURN(auto buf, FindBuffer(t.buffer()));
        work.lanes.push_back(lane_of_[buf->device_index()]);
      }
      CollectiveRunner* runner = env_.collectives;
      work.run = [this, runner, &a](pb::SessionReply*) {
        return runner->Run(
            id_, [this](uint64_t h) { return FindBuffer(h); }, a);
      };
      return work;
    }
    case pb::SessionRequest::kCacheStats: {
      pb::CacheStatsReply* stats = reply->mutable_cache_stats();
      stats->set_uploaded_bytes(uploaded_bytes_.load());
      stats->set_cache_hit_bytes(cache_hit_bytes_.load());
      stats->set_model_file_bytes(model_file_bytes_.load());
      stats->set_cache_blobs(env_.cache == nullptr ? 0 : env_.cache->blob_count());
      return Work{};
    }
    case pb::SessionRequest::kOpenModelFile:
      TG_RETURN_IF_ERROR(OpenModelFile(req.open_model_file(), reply->mutable_model_file()));
      return Work{};
    case pb::SessionRequest::kBatch:
      return absl::InvalidArgumentError("a batch may not hold a batch");
    case pb::SessionRequest::COMMAND_NOT_SET:
      break;
  }
  // A command of a later protocol minor arrives as an unknown field: the client may fall
  // back to what older servers understand.
  if (!req.GetReflection()->GetUnknownFields(req).empty()) {
    return absl::UnimplementedError(
        absl::StrFormat("command unknown to this server (protocol %d.%d)", rpc::kProtocolVersion,
                        rpc::kProtocolMinor));
  }
  return absl::InvalidArgumentError("request carries no command");
}

absl::Status Session::OpenModelFile(const pb::OpenModelFile& cmd, pb::OpenModelFileReply* reply) {
  if (env_.models == nullptr) {
    return absl::NotFoundError("this rpc-server has no --model-dir: upload the weights");
  }
  rpc::ModelIdentity identity;
  identity.size = cmd.size();
  TG_ASSIGN_OR_RETURN(identity.header, rpc::DigestFromBytes(cmd.header_sha256()));
  TG_ASSIGN_OR_RETURN(ModelIndex::Match match, env_.models->Find(cmd.name(), identity));
  {
    absl::MutexLock lock(&table_mu_);
    model_files_.insert(match.file);
  }
  reply->set_file(match.file);
  reply->set_name(match.name);
  reply->set_pieces(match.pieces);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Session::ModelFile(uint64_t handle) const {
  absl::MutexLock lock(&table_mu_);
  if (!model_files_.contains(handle)) {
    return absl::NotFoundError(
        absl::StrCat("model file handle ", handle, " was not opened by this session"));
  }
  return handle;
}

namespace {

// Whether `device` has room for `size` more bytes: the server-wide host reserve (so that no
// set of sessions takes the host's last memory), then the device's free memory.
absl::Status CheckRoom(Device& device, uint64_t size) {
  if (const uint64_t reserve = HostMemoryReserve();
      reserve != 0 && device.default_buffer_type()->is_host()) {
    TG_RETURN_IF_ERROR(CheckHostMemoryReserve(size, HostMemoryAvailable(), reserve));
  }
  const DeviceMemory mem = device.memory();
  if (size > mem.free) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%d bytes asked on %s, which has %d bytes free", size, device.name(), mem.free));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MemoryReservation> Session::ReserveMemory(uint64_t size) {
  return MemoryReservation::Reserve(&bytes_held_, env_.mem_limit, size, env_.budget);
}

void Session::ReleaseMemory(uint64_t size) {
  bytes_held_ -= size;
  if (env_.budget != nullptr) env_.budget->Give(size);
}

absl::Status Session::Alloc(const pb::AllocBuffer& cmd, pb::AllocBufferReply* reply) {
  TG_ASSIGN_OR_RETURN(Device * device, DeviceAt(cmd.device()));
  const uint64_t size = cmd.size();
  BufferType* type = device->default_buffer_type();
  if (size > type->max_size()) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%d bytes exceed the largest buffer of %s (%d bytes)", size, device->name(),
                        type->max_size()));
  }
  if (const uint64_t cap = env_.max_buffers, held = buffer_count(); cap != 0 && held >= cap) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "this session holds %d buffers, the most one session may hold; free some, or raise "
        "the server's --max-buffers-per-session (%d)",
        held, cap));
  }
  // Counted against the session limit and the server budget first; every early return below
  // gives the bytes back. Tiny buffers are charged their bookkeeping.
  TG_ASSIGN_OR_RETURN(MemoryReservation reservation, ReserveMemory(BufferCharge(size)));
  // Memory a closed session left (the same model loaded again) needs no room and no faults.
  const std::shared_ptr<SessionBufferRecycler>& recycler = env_.recycler;
  std::unique_ptr<Buffer> kept = recycler != nullptr ? recycler->Take(type, size) : nullptr;
  const bool recycled = kept != nullptr;
  absl::StatusOr<std::unique_ptr<Buffer>> buffer = std::move(kept);
  if (!recycled) {
    absl::Status room = CheckRoom(*device, size);
    // Memory kept for reuse must not cost an allocation that would fit without it.
    if (!room.ok() && recycler != nullptr && recycler->ReleaseAll() > 0) {
      room = CheckRoom(*device, size);
    }
    TG_RETURN_IF_ERROR(room);
    // At least one byte, so that every buffer has an address.
    buffer = type->Allocate(std::max<uint64_t>(size, 1));
    if (!buffer.ok() && recycler != nullptr && recycler->ReleaseAll() > 0) {
      buffer = type->Allocate(std::max<uint64_t>(size, 1));
    }
  }
  if (!buffer.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("allocation failed: ", buffer.status().message()));
  }
  // Fresh memory may hold another session's old data: SessionBuffer zeroes what no write
  // reaches before anything can read it.
  reservation.Commit();  // Free gives the bytes back.
  Metrics* metrics = env_.metrics;
  if (metrics != nullptr) metrics->BufferAllocated(size);
  auto entry = std::make_shared<SessionBuffer>(
      std::move(*buffer), static_cast<int>(cmd.device()), size,
      [metrics](uint64_t bytes) {
        if (metrics != nullptr) metrics->BufferFreed(bytes);
      },
      progress_, recycler, recycled);
  uint64_t handle;
  {
    absl::MutexLock lock(&table_mu_);
    handle = NextHandle();
    buffers_[handle] = std::move(entry);
  }
  reply->set_buffer(handle);
  reply->set_size(size);
  // From the first buffer on a second device on, devices get their lanes. Commands before
  // ran (and finished) on the calling thread, so the order holds across the switch.
  const int lane = lane_of_[cmd.device()];
  if (first_lane_ < 0) first_lane_ = lane;
  if (lane != first_lane_) parallel_ = true;
  return absl::OkStatus();
}

absl::Status Session::Free(uint64_t handle) {
  std::shared_ptr<SessionBuffer> entry;
  {
    absl::MutexLock lock(&table_mu_);
    auto it = handle == 0 ? buffers_.end() : buffers_.find(handle);
    if (it == buffers_.end()) {
      return absl::NotFoundError(
          absl::StrFormat("no buffer with handle %#x in this session", handle));
    }
    entry = std::move(it->second);
    buffers_.erase(it);
  }
  ReleaseMemory(BufferCharge(entry->size()));
  if (auto g = grants_.find(handle); g != grants_.end()) {
    if (env_.grants != nullptr) env_.grants->Revoke(g->second);
    grants_.erase(g);
  }
  // Cached graphs that point into this buffer go too.
  graphs_.remove_if([handle](const std::shared_ptr<CachedGraph>& c) {
    return std::binary_search(c->graph->handles.begin(), c->graph->handles.end(), handle);
  });
  return absl::OkStatus();  // the memory goes when the last in-flight stream lets go.
}

absl::Status Session::Grant(uint64_t handle, pb::GrantPeerReadReply* reply) {
  if (env_.grants == nullptr) return absl::UnimplementedError("peer reads are not enabled");
  TG_ASSIGN_OR_RETURN(std::shared_ptr<SessionBuffer> buf, FindBuffer(handle));
  auto it = grants_.find(handle);
  if (mailbox_ == nullptr) {
    mailbox_ = std::make_shared<MailboxAccount>(
        log_id(), [this](uint64_t n) { return ReserveMemory(n); },
        [this](uint64_t n) { ReleaseMemory(n); }, env_.metrics);
  }
  if (it == grants_.end()) it = grants_.emplace(handle, env_.grants->Grant(buf, mailbox_)).first;
  reply->set_grant(it->second);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Session::CachedGraph>> Session::GraphFor(const pb::Compute& cmd) {
  auto same = [&](const std::shared_ptr<CachedGraph>& c) {
    return c->device == cmd.device() && c->key == cmd.graph_key();
  };
  if (!cmd.has_graph()) {
    auto it = std::find_if(graphs_.begin(), graphs_.end(), same);
    if (it == graphs_.end()) {
      return absl::FailedPreconditionError(
          absl::StrFormat("graph not cached (key %#x); send it again", cmd.graph_key()));
    }
    graphs_.splice(graphs_.begin(), graphs_, it);
    return graphs_.front();
  }
  TG_ASSIGN_OR_RETURN(Device * device, DeviceAt(cmd.device()));
  TG_RETURN_IF_ERROR(CheckGraphSize(cmd.graph()));
  // Charged before decoding: room is made by dropping the oldest graphs, first down to the
  // cache's own bound, then as far as the session's memory limit needs.
  const uint64_t bytes = DecodedGraphBytes(cmd.graph());
  EvictGraphs(bytes);
  absl::StatusOr<MemoryReservation> charge = ReserveMemory(bytes);
  while (!charge.ok() && charge.status().code() == absl::StatusCode::kResourceExhausted &&
         !graphs_.empty()) {
    graphs_.pop_back();
    charge = ReserveMemory(bytes);
  }
  if (!charge.ok()) {
    return absl::Status(
        charge.status().code(),
        absl::StrFormat("graph of %d tensors (about %d bytes decoded): %s",
                        cmd.graph().tensors_size(), bytes, charge.status().message()));
  }
  auto cached = std::make_shared<CachedGraph>();
  cached->charge.emplace(*std::move(charge));
  BufferResolver resolve = [&](uint64_t handle) -> absl::StatusOr<ResolvedBuffer> {
    TG_ASSIGN_OR_RETURN(std::shared_ptr<SessionBuffer> buf, FindBuffer(handle));
    // The graph may read any of it: bytes no write reached are zeroed first (a write queued
    // on the device's lane lands after, SessionBuffer orders the two).
    TG_RETURN_IF_ERROR(buf->ClearUnwritten());
    const ResolvedBuffer resolved{buf->buffer(), buf->size()};
    cached->buffers.push_back(std::move(buf));
    return resolved;
  };
  TG_ASSIGN_OR_RETURN(cached->graph, DecodeGraph(cmd.graph(), device, resolve));
  cached->device = cmd.device();
  cached->key = cmd.graph_key();
  graphs_.remove_if(same);
  graphs_.push_front(std::move(cached));
  while (graphs_.size() > kGraphCacheSize) graphs_.pop_back();
  return graphs_.front();
}

void Session::EvictGraphs(uint64_t more) {
  uint64_t held = 0;
  for (const auto& g : graphs_) held += g->charge->size();
  while (!graphs_.empty() && held + more > kMaxGraphCacheBytes) {
    held -= graphs_.back()->charge->size();
    graphs_.pop_back();
  }
}

absl::StatusOr<Session::Work> Session::PrepareCompute(const pb::Compute& cmd) {
  TG_RETURN_IF_ERROR(DeviceAt(cmd.device()).status());
  TG_ASSIGN_OR_RETURN(std::shared_ptr<CachedGraph> graph, GraphFor(cmd));

  // Check every input and output before touching anything.
  std::vector<std::shared_ptr<SessionBuffer>> inputs, outputs;
  uint64_t in_bytes = 0, out_bytes = 0;
  for (const pb::WriteRange& w : cmd.inputs()) {
    TG_ASSIGN_OR_RETURN(auto buf, FindBuffer(w.buffer()));
    TG_RETURN_IF_ERROR(buf->CheckRange(w.offset(), w.data().size()));
    in_bytes += w.data().size();
    inputs.push_back(std::move(buf));
  }
  for (const pb::Range& r : cmd.outputs()) {
    TG_ASSIGN_OR_RETURN(auto buf, FindBuffer(r.buffer()));
    TG_RETURN_IF_ERROR(buf->CheckRange(r.offset(), r.size()));
    if (r.size() > rpc::kMaxInlineBytes - std::min<uint64_t>(out_bytes, rpc::kMaxInlineBytes)) {
      return CheckInline(out_bytes + r.size(), "compute outputs");
    }
    out_bytes += r.size();
    outputs.push_back(std::move(buf));
  }
  TG_RETURN_IF_ERROR(CheckInline(in_bytes, "compute inputs"));
  // Inputs and outputs may be in buffers of other devices (a write rides along with any
  // Compute): the work takes every lane it touches.
  Work work;
  work.lanes.push_back(lane_of_[cmd.device()]);
  for (const auto* list : {&inputs, &outputs}) {
    for (const auto& buf : *list) work.lanes.push_back(lane_of_[buf->device_index()]);
  }
  work.run = [this, &cmd, graph = std::move(graph), inputs = std::move(inputs),
              outputs = std::move(outputs)](pb::SessionReply* reply) {
    return RunCompute(cmd, *graph->graph, inputs, outputs, reply->mutable_compute());
  };
  return work;
}

absl::Status Session::RunCompute(const pb::Compute& cmd, DecodedGraph& graph,
                                 const std::vector<std::shared_ptr<SessionBuffer>>& inputs,
                                 const std::vector<std::shared_ptr<SessionBuffer>>& outputs,
                                 pb::ComputeReply* reply) {
  for (int i = 0; i < cmd.inputs_size(); ++i) {
    const pb::WriteRange& w = cmd.inputs(i);
    TG_RETURN_IF_ERROR(inputs[i]->Write(w.offset(), w.data().data(), w.data().size()));
  }
  TG_ASSIGN_OR_RETURN(Stream * stream, StreamFor(cmd.device()));
  const auto start = std::chrono::steady_clock::now();
  TG_RETURN_IF_ERROR(stream->Compute(graph.graph));
  TG_RETURN_IF_ERROR(stream->Synchronize());
  const auto end = std::chrono::steady_clock::now();
  if (env_.metrics != nullptr) env_.metrics->ComputeRun();
  reply->set_compute_us(std::chrono::duration<double, std::micro>(end - start).count());
  for (int i = 0; i < cmd.outputs_size(); ++i) {
    const pb::Range& r = cmd.outputs(i);
    std::string* data = reply->add_outputs();
    data->resize(r.size());
    TG_RETURN_IF_ERROR(outputs[i]->Read(r.offset(), data->data(), r.size()));
  }
  return absl::OkStatus();
}

}  // namespace tg::server
