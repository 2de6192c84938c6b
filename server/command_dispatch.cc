#include "server/command_dispatch.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/context.h"
#include "core/lost_endpoint.h"
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
#include "server/session_buffer_recycler.h"

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

CommandDispatch::CommandDispatch(Env env)
    : env_(std::move(env)),
      lane_of_(LanesOf(env_.devices)),
      streams_(env_.devices.size()),
      lanes_(static_cast<int>(env_.devices.size())) {}

void CommandDispatch::Run(std::shared_ptr<const pb::SessionRequest> request,
                          ReplySequencer* replies) {
  absl::MutexLock lock(&mu_);
  if (!request->has_batch()) {
    ReplySequencer::Group* group = replies->Open(request->id(), /*batch=*/false, 1);
    Dispatch(request, *request, replies, group, 0);
    return;
  }
  const auto& commands = request->batch().commands();
  ReplySequencer::Group* group = replies->Open(request->id(), /*batch=*/true, commands.size());
  for (int i = 0; i < commands.size();) {
    const int n = PullRun(*request, i);
    if (n > 1) {
      DispatchPulls(request, i, n, replies, group);
    } else {
      Dispatch(request, commands[i], replies, group, i);
    }
    i += std::max(n, 1);
  }
}

void CommandDispatch::RunOne(std::shared_ptr<const pb::SessionRequest> request,
                             ReplySequencer* replies) {
  absl::MutexLock lock(&mu_);
  // Even a batch is one command here, which Prepare refuses.
  const pb::SessionRequest& command = *request;
  Dispatch(std::move(request), command, replies, replies->Open(command.id(), /*batch=*/false, 1),
           0);
}

void CommandDispatch::Refuse(uint64_t id, const absl::Status& status, ReplySequencer* replies) {
  pb::SessionRequest request;
  request.set_id(id);
  pb::SessionReply reply;
  reply.set_id(id);
  absl::MutexLock lock(&mu_);
  ReplySequencer::Group* group = replies->Open(id, /*batch=*/false, 1);
  Finish(request, status, &reply);
  replies->Fill(group, 0, std::move(reply));
}

void CommandDispatch::Close() {
  absl::MutexLock lock(&mu_);
  streams_.clear();
  if (env_.grants != nullptr) {
    for (const auto& [handle, grant] : grants_) env_.grants->Revoke(grant);
  }
  grants_.clear();
  // Revoking dropped the pieces peers delivered for the grants; nothing reaches us after this.
  if (mailbox_ != nullptr) mailbox_->Close();
}

absl::StatusOr<Device*> CommandDispatch::DeviceAt(uint32_t index) const {
  if (index >= env_.devices.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "device %d does not exist (this server has %d)", index, env_.devices.size()));
  }
  return env_.devices[index];
}

absl::StatusOr<Stream*> CommandDispatch::StreamFor(uint32_t device) {
  TG_ASSIGN_OR_RETURN(Device * d, DeviceAt(device));
  std::unique_ptr<Stream>& stream = streams_[device];
  if (stream == nullptr) {
    TG_ASSIGN_OR_RETURN(stream, d->CreateStream());
  }
  return stream.get();
}

void CommandDispatch::Finish(const pb::SessionRequest& command, const absl::Status& status,
                             pb::SessionReply* reply) const {
  if (!status.ok()) {
    if (LogEnabled(LogLevel::kDebug)) {
      kServerLog.Debug("command failed", {{"session", env_.log_id},
                                          {"request", command.id()},
                                          {"command", static_cast<int>(command.command_case())},
                                          {"code", absl::StatusCodeToString(status.code())},
                                          {"error", status.message()}});
    }
    reply->clear_result();
    reply->set_code(static_cast<int32_t>(status.code()));
    reply->set_message(std::string(status.message()));
    // Which peer was lost travels typed, beside the message (core/lost_endpoint.h).
    if (std::optional<std::string> lost = LostEndpoint(status)) reply->set_lost_endpoint(*lost);
  }
  if (env_.metrics != nullptr) env_.metrics->Request(static_cast<int>(status.code()));
}

void CommandDispatch::Dispatch(std::shared_ptr<const pb::SessionRequest> message,
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

int CommandDispatch::PullRun(const pb::SessionRequest& batch, int first) const {
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

void CommandDispatch::DispatchPulls(std::shared_ptr<const pb::SessionRequest> message, int first,
                                    int n, ReplySequencer* replies, ReplySequencer::Group* group) {
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

CommandDispatch::Work CommandDispatch::OnLaneOf(
    const SessionBuffer& buf, absl::AnyInvocable<absl::Status(pb::SessionReply*)> run) const {
  Work work;
  work.lanes.push_back(lane_of_[buf.device_index()]);
  work.run = std::move(run);
  return work;
}

absl::StatusOr<CommandDispatch::Work> CommandDispatch::PreparePush(const pb::PeerPush& p) {
  // Without a PeerClient the checks still run and Send answers UNIMPLEMENTED.
  if (env_.pushes == nullptr) return absl::UnimplementedError("peer_push is not enabled");
  TG_RETURN_IF_ERROR(PeerPushes::Check(p));
  // The pieces are read on the lanes of their buffers: after the work queued there.
  Work work;
  std::vector<std::shared_ptr<SessionBuffer>> sources;
  for (const pb::PushPiece& piece : p.pieces()) {
    TG_ASSIGN_OR_RETURN(auto src, env_.table->Find(piece.buffer()));
    TG_RETURN_IF_ERROR(src->CheckRange(piece.offset(), piece.size()));
    work.lanes.push_back(lane_of_[src->device_index()]);
    sources.push_back(std::move(src));
  }
  PeerPushes* pushes = env_.pushes;
  work.run = [pushes, sources = std::move(sources), &p, session = env_.session_id](
                 pb::SessionReply*) { return pushes->Send(p, sources, session); };
  return work;
}

absl::StatusOr<CommandDispatch::Work> CommandDispatch::Prepare(const pb::SessionRequest& req,
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
      TG_ASSIGN_OR_RETURN(auto buf, env_.table->Find(req.clear_buffer().buffer()));
      return OnLaneOf(
          *buf, [buf, value](pb::SessionReply*) { return buf->Memset(0, value, buf->size()); });
    }
    case pb::SessionRequest::kWrite: {
      const pb::WriteRange& w = req.write();
      TG_RETURN_IF_ERROR(CheckInline(w.data().size(), "write"));
      TG_ASSIGN_OR_RETURN(auto buf, env_.table->Find(w.buffer()));
      return OnLaneOf(*buf, [buf, &w](pb::SessionReply*) {
        return buf->Write(w.offset(), w.data().data(), w.data().size());
      });
    }
    case pb::SessionRequest::kRead: {
      const pb::Range& r = req.read().range();
      TG_RETURN_IF_ERROR(CheckInline(r.size(), "read"));
      TG_ASSIGN_OR_RETURN(auto buf, env_.table->Find(r.buffer()));
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
      TG_ASSIGN_OR_RETURN(auto buf, env_.table->Find(w.rows().buffer()));
      return OnLaneOf(
          *buf, [buf, r, &w](pb::SessionReply*) { return buf->WriteRows(r, w.data().data()); });
    }
    case pb::SessionRequest::kReadRows: {
      TG_ASSIGN_OR_RETURN(const StridedRange r, WireRows(req.read_rows().rows(), "read_rows"));
      TG_ASSIGN_OR_RETURN(auto buf, env_.table->Find(req.read_rows().rows().buffer()));
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
      TG_ASSIGN_OR_RETURN(auto buf, env_.table->Find(r.buffer()));
      return OnLaneOf(*buf, [buf, &r, value](pb::SessionReply*) {
        return buf->Memset(r.offset(), value, r.size());
      });
    }
    case pb::SessionRequest::kCopy: {
      const pb::CopyRange& c = req.copy();
      TG_ASSIGN_OR_RETURN(auto src, env_.table->Find(c.src().buffer()));
      TG_ASSIGN_OR_RETURN(auto dst, env_.table->Find(c.dst_buffer()));
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
      TG_ASSIGN_OR_RETURN(auto dst, env_.table->Find(p.dst_buffer()));
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
      TG_ASSIGN_OR_RETURN(auto dst, env_.table->Find(a.dst_buffer()));
      TG_RETURN_IF_ERROR(dst->CheckRange(a.dst_offset(), a.size()));
      auto grant = grants_.find(a.dst_buffer());
      if (grant == grants_.end()) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "await_push: buffer %d has no peer grant, which names its pieces (GrantPeerRead it "
            "first)",
            a.dst_buffer()));
      }
      PeerPushes* pushes = env_.pushes;
      return OnLaneOf(*dst, [this, pushes, dst, grant = grant->second, &a](pb::SessionReply*) {
        return pushes->Await(a, grant, *dst, [this] { return cancelled(); });
      });
    }
    case pb::SessionRequest::kAllReduce: {
      if (env_.collectives == nullptr) return absl::UnimplementedError("all_reduce is not enabled");
      const pb::AllReduce& a = req.all_reduce();
      // The server's part reads every local tensor of the collective: it waits for the work
      // queued on each of their devices and holds back what comes after.
      Work work;
      for (const pb::CollectiveTensor& t : a.tensors()) {
        TG_ASSIGN_OR_RETURN(auto buf, env_.table->Find(t.buffer()));
        work.lanes.push_back(lane_of_[buf->device_index()]);
      }
      CollectiveRunner* runner = env_.collectives;
      work.run = [this, runner, &a](pb::SessionReply*) {
        return runner->Run(
            env_.session_id, [this](uint64_t h) { return env_.table->Find(h); }, a,
            [this] { return cancelled(); });
      };
      return work;
    }
    case pb::SessionRequest::kCacheStats: {
      pb::CacheStatsReply* stats = reply->mutable_cache_stats();
      stats->set_uploaded_bytes(env_.counters->uploaded.load());
      stats->set_cache_hit_bytes(env_.counters->cache_hit.load());
      stats->set_model_file_bytes(env_.counters->model_file.load());
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

absl::Status CommandDispatch::OpenModelFile(const pb::OpenModelFile& cmd,
                                            pb::OpenModelFileReply* reply) {
  if (env_.models == nullptr) {
    return absl::NotFoundError("this rpc-server has no --model-dir: upload the weights");
  }
  rpc::ModelIdentity identity;
  identity.size = cmd.size();
  TG_ASSIGN_OR_RETURN(identity.header, rpc::DigestFromBytes(cmd.header_sha256()));
  TG_ASSIGN_OR_RETURN(ModelIndex::Match match, env_.models->Find(cmd.name(), identity));
  env_.table->AddModelFile(match.file);
  reply->set_file(match.file);
  reply->set_name(match.name);
  reply->set_pieces(match.pieces);
  return absl::OkStatus();
}

absl::Status CommandDispatch::Alloc(const pb::AllocBuffer& cmd, pb::AllocBufferReply* reply) {
  TG_ASSIGN_OR_RETURN(Device * device, DeviceAt(cmd.device()));
  const uint64_t size = cmd.size();
  BufferType* type = device->default_buffer_type();
  if (size > type->max_size()) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%d bytes exceed the largest buffer of %s (%d bytes)", size, device->name(),
                        type->max_size()));
  }
  // The buffer cap, then counted against the session limit and the server budget; every
  // early return below gives the bytes back. Tiny buffers are charged their bookkeeping.
  TG_ASSIGN_OR_RETURN(MemoryReservation reservation, env_.table->ReserveBuffer(size));
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
  Metrics* metrics = env_.metrics;
  if (metrics != nullptr) metrics->BufferAllocated(size);
  auto entry = std::make_shared<SessionBuffer>(
      std::move(*buffer), static_cast<int>(cmd.device()), size,
      [metrics](uint64_t bytes) {
        if (metrics != nullptr) metrics->BufferFreed(bytes);
      },
      env_.progress, recycler, recycled);
  // Committed: Free gives the bytes back.
  const uint64_t handle = env_.table->Insert(std::move(entry), std::move(reservation));
  reply->set_buffer(handle);
  reply->set_size(size);
  // From the first buffer on a second device on, devices get their lanes. Commands before
  // ran (and finished) on the calling thread, so the order holds across the switch.
  const int lane = lane_of_[cmd.device()];
  if (first_lane_ < 0) first_lane_ = lane;
  if (lane != first_lane_) parallel_ = true;
  return absl::OkStatus();
}

absl::Status CommandDispatch::Free(uint64_t handle) {
  // Its charge goes back now.
  TG_ASSIGN_OR_RETURN(std::shared_ptr<SessionBuffer> entry, env_.table->Remove(handle));
  if (auto g = grants_.find(handle); g != grants_.end()) {
    if (env_.grants != nullptr) env_.grants->Revoke(g->second);
    grants_.erase(g);
  }
  // Cached graphs that point into this buffer go too.
  env_.graphs->DropUsing(handle);
  return absl::OkStatus();  // the memory goes when the last in-flight stream lets go.
}

absl::Status CommandDispatch::Grant(uint64_t handle, pb::GrantPeerReadReply* reply) {
  if (env_.grants == nullptr) return absl::UnimplementedError("peer reads are not enabled");
  TG_ASSIGN_OR_RETURN(std::shared_ptr<SessionBuffer> buf, env_.table->Find(handle));
  auto it = grants_.find(handle);
  if (mailbox_ == nullptr) {
    mailbox_ = std::make_shared<MailboxAccount>(
        env_.log_id, [table = env_.table](uint64_t n) { return table->ReserveMemory(n); },
        [table = env_.table](uint64_t n) { table->ReleaseMemory(n); }, env_.metrics);
  }
  if (it == grants_.end()) it = grants_.emplace(handle, env_.grants->Grant(buf, mailbox_)).first;
  reply->set_grant(it->second);
  return absl::OkStatus();
}

absl::StatusOr<CommandDispatch::Work> CommandDispatch::PrepareCompute(const pb::Compute& cmd) {
  TG_ASSIGN_OR_RETURN(Device * device, DeviceAt(cmd.device()));
  TG_ASSIGN_OR_RETURN(std::shared_ptr<GraphCache::Entry> graph, env_.graphs->For(cmd, device));

  // Check every input and output before touching anything.
  std::vector<std::shared_ptr<SessionBuffer>> inputs, outputs;
  uint64_t in_bytes = 0, out_bytes = 0;
  for (const pb::WriteRange& w : cmd.inputs()) {
    TG_ASSIGN_OR_RETURN(auto buf, env_.table->Find(w.buffer()));
    TG_RETURN_IF_ERROR(buf->CheckRange(w.offset(), w.data().size()));
    in_bytes += w.data().size();
    inputs.push_back(std::move(buf));
  }
  for (const pb::Range& r : cmd.outputs()) {
    TG_ASSIGN_OR_RETURN(auto buf, env_.table->Find(r.buffer()));
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

absl::Status CommandDispatch::RunCompute(const pb::Compute& cmd, DecodedGraph& graph,
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
