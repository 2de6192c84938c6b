#include "server/session.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/context.h"
#include "core/status_macros.h"
#include "proto/protocol.h"
#include "server/collective_runner.h"
#include "server/grant_table.h"
#include "server/log.h"
#include "server/memory_reservation.h"
#include "server/metrics.h"
#include "server/peer_client.h"
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

}  // namespace

Session::Session(std::string id, SessionEnv env)
    : id_(std::move(id)),
      env_(std::move(env)),
      handle_key_(env_.predictable_handles ? 0 : RandomU64()),
      handle_mult_(env_.predictable_handles ? 1 : RandomU64() | 1) {}

Session::~Session() {
  absl::MutexLock lock(&handle_mu_);
  graphs_.clear();  // they point into the buffers.
  streams_.clear();
  if (env_.grants != nullptr) {
    for (const auto& [handle, grant] : grants_) env_.grants->Revoke(grant);
  }
  grants_.clear();
  absl::flat_hash_map<uint64_t, std::shared_ptr<SessionBuffer>> buffers;
  {
    absl::MutexLock table_lock(&table_mu_);
    buffers.swap(buffers_);
  }
  buffers.clear();           // outside the lock: destructors report to metrics.
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
  auto it = streams_.find(device);
  if (it != streams_.end()) return it->second.get();
  TG_ASSIGN_OR_RETURN(Device * d, DeviceAt(device));
  TG_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream, d->CreateStream());
  Stream* raw = stream.get();
  streams_[device] = std::move(stream);
  return raw;
}

pb::SessionReply Session::Handle(const pb::SessionRequest& request) {
  absl::MutexLock lock(&handle_mu_);
  pb::SessionReply reply;
  reply.set_id(request.id());
  absl::Status status;
  if (request.id() == 0) {
    status = absl::InvalidArgumentError("request id must be > 0");
  } else {
    status = DoCommand(request, &reply);
  }
  if (!status.ok()) {
    if (LogEnabled(LogLevel::kDebug)) {
      kServerLog.Debug("command failed", {{"session", log_id()},
                                          {"request", request.id()},
                                          {"command", static_cast<int>(request.command_case())},
                                          {"code", absl::StatusCodeToString(status.code())},
                                          {"error", status.message()}});
    }
    reply.clear_result();
    reply.set_code(static_cast<int32_t>(status.code()));
    reply.set_message(std::string(status.message()));
  }
  if (env_.metrics != nullptr) env_.metrics->Request(static_cast<int>(status.code()));
  return reply;
}

bool Session::Serve(const pb::SessionRequest& request,
                    absl::FunctionRef<bool(const pb::SessionReply&)> send) {
  if (!request.has_batch()) return send(Handle(request));
  pb::SessionReply group;  // an empty batch gets an empty BatchReply.
  group.set_id(request.id());
  pb::BatchReply* replies = group.mutable_batch();
  size_t group_bytes = 0;
  for (const pb::SessionRequest& command : request.batch().commands()) {
    pb::SessionReply reply = Handle(command);
    const size_t bytes = reply.ByteSizeLong();
    if (group_bytes > 0 && group_bytes + bytes > kMaxBatchReplyBytes) {
      if (!send(group)) return false;
      replies->clear_replies();
      group_bytes = 0;
    }
    *replies->add_replies() = std::move(reply);
    group_bytes += bytes;
  }
  return send(group);
}

absl::Status Session::DoCommand(const pb::SessionRequest& req, pb::SessionReply* reply) {
  switch (req.command_case()) {
    case pb::SessionRequest::kAllocBuffer:
      return Alloc(req.alloc_buffer(), reply->mutable_alloc_buffer());
    case pb::SessionRequest::kFreeBuffer:
      return Free(req.free_buffer().buffer());
    case pb::SessionRequest::kClearBuffer: {
      TG_ASSIGN_OR_RETURN(uint8_t value, ByteValue(req.clear_buffer().value()));
      TG_ASSIGN_OR_RETURN(auto buf, FindBuffer(req.clear_buffer().buffer()));
      return buf->Memset(0, value, buf->size());
    }
    case pb::SessionRequest::kWrite: {
      const pb::WriteRange& w = req.write();
      TG_RETURN_IF_ERROR(CheckInline(w.data().size(), "write"));
      TG_ASSIGN_OR_RETURN(auto buf, FindBuffer(w.buffer()));
      return buf->Write(w.offset(), w.data().data(), w.data().size());
    }
    case pb::SessionRequest::kRead: {
      const pb::Range& r = req.read().range();
      TG_RETURN_IF_ERROR(CheckInline(r.size(), "read"));
      TG_ASSIGN_OR_RETURN(auto buf, FindBuffer(r.buffer()));
      TG_RETURN_IF_ERROR(buf->CheckRange(r.offset(), r.size()));
      std::string* data = reply->mutable_read()->mutable_data();
      data->resize(r.size());
      return buf->Read(r.offset(), data->data(), r.size());
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
      return buf->WriteRows(r, w.data().data());
    }
    case pb::SessionRequest::kReadRows: {
      TG_ASSIGN_OR_RETURN(const StridedRange r, WireRows(req.read_rows().rows(), "read_rows"));
      TG_ASSIGN_OR_RETURN(auto buf, FindBuffer(req.read_rows().rows().buffer()));
      TG_RETURN_IF_ERROR(buf->CheckRows(r));
      std::string* data = reply->mutable_read()->mutable_data();
      data->resize(r.n_rows * r.row_size);
      return buf->ReadRows(r, data->data());
    }
    case pb::SessionRequest::kMemset: {
      const pb::Range& r = req.memset().range();
      TG_ASSIGN_OR_RETURN(uint8_t value, ByteValue(req.memset().value()));
      TG_ASSIGN_OR_RETURN(auto buf, FindBuffer(r.buffer()));
      return buf->Memset(r.offset(), value, r.size());
    }
    case pb::SessionRequest::kCopy: {
      const pb::CopyRange& c = req.copy();
      TG_ASSIGN_OR_RETURN(auto src, FindBuffer(c.src().buffer()));
      TG_ASSIGN_OR_RETURN(auto dst, FindBuffer(c.dst_buffer()));
      return SessionBuffer::Copy(*src, c.src().offset(), *dst, c.dst_offset(), c.src().size());
    }
    case pb::SessionRequest::kCompute:
      return RunCompute(req.compute(), reply->mutable_compute());
    case pb::SessionRequest::kGrantPeerRead:
      return Grant(req.grant_peer_read().buffer(), reply->mutable_grant());
    case pb::SessionRequest::kPeerPull: {
      const pb::PeerPull& p = req.peer_pull();
      if (env_.peers == nullptr) return absl::UnimplementedError("peer_pull is not enabled");
      TG_ASSIGN_OR_RETURN(auto dst, FindBuffer(p.dst_buffer()));
      return env_.peers->Pull(p.endpoint(), p.grant(), p.src_offset(), p.size(), *dst,
                              p.dst_offset());
    }
    case pb::SessionRequest::kAllReduce:
      if (env_.collectives == nullptr) return absl::UnimplementedError("all_reduce is not enabled");
      return env_.collectives->Run(
          id_, [this](uint64_t h) { return FindBuffer(h); }, req.all_reduce());
    case pb::SessionRequest::kCacheStats: {
      pb::CacheStatsReply* stats = reply->mutable_cache_stats();
      stats->set_uploaded_bytes(uploaded_bytes_.load());
      stats->set_cache_hit_bytes(cache_hit_bytes_.load());
      return absl::OkStatus();
    }
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

absl::Status Session::Alloc(const pb::AllocBuffer& cmd, pb::AllocBufferReply* reply) {
  TG_ASSIGN_OR_RETURN(Device * device, DeviceAt(cmd.device()));
  const uint64_t size = cmd.size();
  BufferType* type = device->default_buffer_type();
  if (size > type->max_size()) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%d bytes exceed the largest buffer of %s (%d bytes)", size, device->name(),
                        type->max_size()));
  }
  // Counted against the session limit first; every early return below gives the bytes back.
  TG_ASSIGN_OR_RETURN(MemoryReservation reservation,
                      MemoryReservation::Reserve(&bytes_held_, env_.mem_limit, size));
  // Then the server-wide reserve, so that no set of sessions takes the host's last memory.
  if (const uint64_t reserve = HostMemoryReserve(); reserve != 0 && type->is_host()) {
    TG_RETURN_IF_ERROR(CheckHostMemoryReserve(size, HostMemoryAvailable(), reserve));
  }
  const DeviceMemory mem = device->memory();
  if (size > mem.free) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%d bytes asked on %s, which has %d bytes free", size, device->name(), mem.free));
  }
  // At least one byte, so that every buffer has an address.
  absl::StatusOr<std::unique_ptr<Buffer>> buffer = type->Allocate(std::max<uint64_t>(size, 1));
  if (!buffer.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("allocation failed: ", buffer.status().message()));
  }
  // Fresh memory may hold another session's old data: never hand it out.
  TG_RETURN_IF_ERROR((*buffer)->Clear(0));
  reservation.Commit();  // Free gives the bytes back.
  Metrics* metrics = env_.metrics;
  if (metrics != nullptr) metrics->BufferAllocated(size);
  auto entry = std::make_shared<SessionBuffer>(std::move(*buffer), static_cast<int>(cmd.device()),
                                               size, [metrics](uint64_t bytes) {
                                                 if (metrics != nullptr)
                                                   metrics->BufferFreed(bytes);
                                               });
  uint64_t handle;
  {
    absl::MutexLock lock(&table_mu_);
    handle = NextHandle();
    buffers_[handle] = std::move(entry);
  }
  reply->set_buffer(handle);
  reply->set_size(size);
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
  bytes_held_ -= entry->size();
  if (auto g = grants_.find(handle); g != grants_.end()) {
    if (env_.grants != nullptr) env_.grants->Revoke(g->second);
    grants_.erase(g);
  }
  // Cached graphs that point into this buffer go too.
  graphs_.remove_if([handle](const CachedGraph& c) {
    return std::binary_search(c.graph->handles.begin(), c.graph->handles.end(), handle);
  });
  return absl::OkStatus();  // the memory goes when the last in-flight stream lets go.
}

absl::Status Session::Grant(uint64_t handle, pb::GrantPeerReadReply* reply) {
  if (env_.grants == nullptr) return absl::UnimplementedError("peer reads are not enabled");
  TG_ASSIGN_OR_RETURN(std::shared_ptr<SessionBuffer> buf, FindBuffer(handle));
  auto it = grants_.find(handle);
  if (it == grants_.end()) it = grants_.emplace(handle, env_.grants->Grant(buf)).first;
  reply->set_grant(it->second);
  return absl::OkStatus();
}

absl::Status Session::RunCompute(const pb::Compute& cmd, pb::ComputeReply* reply) {
  TG_ASSIGN_OR_RETURN(Device * device, DeviceAt(cmd.device()));
  DecodedGraph* graph = nullptr;
  if (cmd.has_graph()) {
    BufferResolver resolve = [this](uint64_t handle) -> absl::StatusOr<ResolvedBuffer> {
      TG_ASSIGN_OR_RETURN(std::shared_ptr<SessionBuffer> buf, FindBuffer(handle));
      return ResolvedBuffer{buf->buffer(), buf->size()};
    };
    TG_ASSIGN_OR_RETURN(std::unique_ptr<DecodedGraph> decoded,
                        DecodeGraph(cmd.graph(), device, resolve));
    graphs_.remove_if(
        [&](const CachedGraph& c) { return c.device == cmd.device() && c.key == cmd.graph_key(); });
    graphs_.push_front({cmd.device(), cmd.graph_key(), std::move(decoded)});
    while (graphs_.size() > kGraphCacheSize) graphs_.pop_back();
    graph = graphs_.front().graph.get();
  } else {
    auto it = std::find_if(graphs_.begin(), graphs_.end(), [&](const CachedGraph& c) {
      return c.device == cmd.device() && c.key == cmd.graph_key();
    });
    if (it == graphs_.end()) {
      return absl::FailedPreconditionError(
          absl::StrFormat("graph not cached (key %#x); send it again", cmd.graph_key()));
    }
    graphs_.splice(graphs_.begin(), graphs_, it);
    graph = graphs_.front().graph.get();
  }

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
  for (int i = 0; i < cmd.inputs_size(); ++i) {
    const pb::WriteRange& w = cmd.inputs(i);
    TG_RETURN_IF_ERROR(inputs[i]->Write(w.offset(), w.data().data(), w.data().size()));
  }
  TG_ASSIGN_OR_RETURN(Stream * stream, StreamFor(cmd.device()));
  const auto start = std::chrono::steady_clock::now();
  TG_RETURN_IF_ERROR(stream->Compute(graph->graph));
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
