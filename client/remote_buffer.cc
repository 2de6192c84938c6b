#include "client/remote_buffer.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/model_upload.h"
#include "client/piece_rows.h"
#include "client/remote_device.h"
#include "core/status_macros.h"
#include "proto/protocol.h"

namespace tg::rpc {
namespace {

namespace pb = tensorgrid::v1;

// Remote tensors get addresses base + offset for the allocator's arithmetic; nothing on the
// client ever dereferences them. One fixed base leaves room for 2^44-byte buffers.
char* const kFakeBase = reinterpret_cast<char*>(uintptr_t{1} << 44);

}  // namespace

RemoteBufferType::RemoteBufferType(RemoteDevice* device, std::string name, size_t alignment,
                                   size_t max_size)
    : device_(device),
      name_(std::move(name)),
      alignment_(alignment < 1 ? 1 : alignment),
      max_size_(max_size == 0 || max_size > (size_t{1} << 43) ? size_t{1} << 43 : max_size) {}

Device* RemoteBufferType::device() const { return device_; }

absl::StatusOr<std::unique_ptr<Buffer>> RemoteBufferType::Allocate(size_t size) {
  if (size > max_size_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: %d bytes is more than the largest buffer (%d)", name_, size, max_size_));
  }
  pb::SessionRequest request;
  request.mutable_alloc_buffer()->set_device(device_->index());
  request.mutable_alloc_buffer()->set_size(size);
  TG_ASSIGN_OR_RETURN(pb::SessionReply reply, device_->connection()->Call(std::move(request)));
  return std::unique_ptr<Buffer>(
      new RemoteBuffer(this, device_->connection(), reply.alloc_buffer().buffer(), size));
}

RemoteBuffer::RemoteBuffer(RemoteBufferType* type, Connection* connection, uint64_t handle,
                           size_t size)
    : BasicBuffer(type, kFakeBase, size), connection_(connection), handle_(handle) {}

RemoteBuffer::~RemoteBuffer() {
  connection_->ForgetBuffer(handle_);
  pb::SessionRequest request;
  request.mutable_free_buffer()->set_buffer(handle_);
  // A server that is gone has freed it already.
  connection_->Post(std::move(request)).IgnoreError();
}

uint64_t RemoteBuffer::OffsetOf(const Tensor& t, size_t offset) const {
  return static_cast<uint64_t>(static_cast<const char*>(t.data) - kFakeBase) + offset;
}

absl::Status RemoteBuffer::SetTensor(Tensor* t, const void* data, size_t offset, size_t size) {
  TG_RETURN_IF_ERROR(CheckTensorRange(*t, offset, size));
  if (size == 0) return absl::OkStatus();
  const uint64_t at = OffsetOf(*t, offset);
  if (usage() == BufferUsage::kWeights) {
    // Hashes only help a server that can find bytes by them (its cache, its model files).
    const bool cacheable = connection_->MayHaveCache() || connection_->HasModelDir();
    return connection_->Upload(handle_, at, data, size, cacheable);
  }
  if (size > kInlineWriteBytes) return connection_->Upload(handle_, at, data, size, false);
  return connection_->QueueWrite(remote_type()->remote_device()->index(), handle_, at, data, size);
}

absl::Status RemoteBuffer::GetTensor(const Tensor* t, void* data, size_t offset, size_t size) {
  TG_RETURN_IF_ERROR(CheckTensorRange(*t, offset, size));
  if (size == 0) return absl::OkStatus();
  TG_RETURN_IF_ERROR(connection_->Drain());
  const uint64_t at = OffsetOf(*t, offset);
  if (connection_->inline_outputs().Read(handle_, at, data, size)) return absl::OkStatus();
  if (size > kInlineWriteBytes) return connection_->Download(handle_, at, data, size);
  TG_RETURN_IF_ERROR(PostRead(at, data, size));
  return connection_->Drain();
}

absl::Status RemoteBuffer::PostRead(uint64_t at, void* data, size_t size) {
  pb::SessionRequest request;
  pb::Range* r = request.mutable_read()->mutable_range();
  r->set_buffer(handle_);
  r->set_offset(at);
  r->set_size(size);
  Connection* connection = connection_;
  return connection_->Post(std::move(request), [connection, data, size](pb::SessionReply& reply) {
    if (reply.code() != 0) return absl::OkStatus();  // the reply's own error is what is seen.
    if (reply.read().data().size() != size) {
      return absl::DataLossError(absl::StrFormat("rpc-server %s: read of %d bytes returned %d",
                                                 connection->endpoint(), size,
                                                 reply.read().data().size()));
    }
    std::memcpy(data, reply.read().data().data(), size);
    return absl::OkStatus();
  });
}

bool RemoteBuffer::ServerHasRows() const {
  return connection_->hello().protocol_minor() >= kMinorRows;
}

absl::Status RemoteBuffer::SetTensor2D(Tensor* t, const void* data, const StridedRange& r) {
  TG_RETURN_IF_ERROR(CheckTensorRange2D(*t, r));
  const size_t packed = r.n_rows * r.row_size;  // <= the span just checked.
  if (packed == 0) return absl::OkStatus();
  const bool host_packed = r.n_rows == 1 || r.HostStride() == r.row_size;
  if (r.TensorContiguous()) {
    // One plain write: weights keep their hashed upload, small writes their queue.
    if (host_packed) return SetTensor(t, data, r.offset, packed);
    std::vector<uint8_t> staging(packed);
    CopyRows(staging.data(), r.row_size, data, r.HostStride(), r.row_size, r.n_rows);
    return SetTensor(t, staging.data(), r.offset, packed);
  }
  if (!ServerHasRows() || r.row_size > kInlineWriteBytes) return Buffer::SetTensor2D(t, data, r);
  const size_t per_message = kInlineWriteBytes / r.row_size;
  for (size_t first = 0; first < r.n_rows; first += per_message) {
    const size_t n = std::min(per_message, r.n_rows - first);
    pb::SessionRequest request;
    pb::WriteRows* w = request.mutable_write_rows();
    pb::Rows* rows = w->mutable_rows();
    rows->set_buffer(handle_);
    rows->set_offset(OffsetOf(*t, r.offset + first * r.stride));
    rows->set_row_size(r.row_size);
    rows->set_n_rows(n);
    rows->set_stride(r.stride);
    std::string* bytes = w->mutable_data();
    bytes->resize(n * r.row_size);
    CopyRows(bytes->data(), r.row_size, HostRow(data, r, first), r.HostStride(), r.row_size, n);
    TG_RETURN_IF_ERROR(connection_->Post(std::move(request)));
  }
  return absl::OkStatus();
}

absl::Status RemoteBuffer::GetTensor2D(const Tensor* t, void* data, const StridedRange& r) {
  TG_RETURN_IF_ERROR(CheckTensorRange2D(*t, r));
  const size_t packed = r.n_rows * r.row_size;
  if (packed == 0) return absl::OkStatus();
  if (r.TensorContiguous()) {
    // One plain read (a Compute's inline outputs, a Download when large).
    if (r.n_rows == 1 || r.HostStride() == r.row_size) return GetTensor(t, data, r.offset, packed);
    std::vector<uint8_t> staging(packed);
    TG_RETURN_IF_ERROR(GetTensor(t, staging.data(), r.offset, packed));
    CopyRows(data, r.HostStride(), staging.data(), r.row_size, r.row_size, r.n_rows);
    return absl::OkStatus();
  }
  TG_RETURN_IF_ERROR(connection_->Drain());
  const size_t span = *TensorSpan(r);
  if (span <= kInlineWriteBytes) {
    // A Compute's inline outputs may hold the whole span already.
    std::vector<uint8_t> staging(span);
    if (connection_->inline_outputs().Read(handle_, OffsetOf(*t, r.offset), staging.data(), span)) {
      CopyRows(data, r.HostStride(), staging.data(), r.stride, r.row_size, r.n_rows);
      return absl::OkStatus();
    }
  }
  if (!ServerHasRows() || r.row_size > kInlineWriteBytes) return Buffer::GetTensor2D(t, data, r);
  const size_t per_message = kInlineWriteBytes / r.row_size;
  for (size_t first = 0; first < r.n_rows; first += per_message) {
    const size_t n = std::min(per_message, r.n_rows - first);
    TG_RETURN_IF_ERROR(PostReadRows(OffsetOf(*t, r.offset), r, first, n, data));
  }
  // Every piece in one round trip; a server that turns out not to know ReadRows after all
  // gets the row loop.
  absl::Status s = connection_->Drain();
  if (absl::IsUnimplemented(s)) return Buffer::GetTensor2D(t, data, r);
  return s;
}

absl::Status RemoteBuffer::PostReadRows(uint64_t at, const StridedRange& r, size_t first, size_t n,
                                        void* data) {
  pb::SessionRequest request;
  pb::Rows* rows = request.mutable_read_rows()->mutable_rows();
  rows->set_buffer(handle_);
  rows->set_offset(at + first * r.stride);
  rows->set_row_size(r.row_size);
  rows->set_n_rows(n);
  rows->set_stride(r.stride);
  uint8_t* out = HostRow(data, r, first);
  const size_t row_size = r.row_size, host_stride = r.HostStride();
  Connection* connection = connection_;
  return connection_->Post(
      std::move(request), [connection, out, n, row_size, host_stride](pb::SessionReply& reply) {
        if (reply.code() != 0) return absl::OkStatus();  // the reply's own error is what is seen.
        if (reply.read().data().size() != n * row_size) {
          return absl::DataLossError(
              absl::StrFormat("rpc-server %s: a read of %d rows of %d bytes returned %d bytes",
                              connection->endpoint(), n, row_size, reply.read().data().size()));
        }
        CopyRows(out, host_stride, reply.read().data().data(), row_size, row_size, n);
        return absl::OkStatus();
      });
}

absl::Status RemoteBuffer::MemsetTensor(Tensor* t, uint8_t value, size_t offset, size_t size) {
  TG_RETURN_IF_ERROR(CheckTensorRange(*t, offset, size));
  pb::SessionRequest request;
  pb::Range* r = request.mutable_memset()->mutable_range();
  r->set_buffer(handle_);
  r->set_offset(OffsetOf(*t, offset));
  r->set_size(size);
  request.mutable_memset()->set_value(value);
  return connection_->Post(std::move(request));
}

absl::Status RemoteBuffer::PostCopy(const RemoteBuffer& from, const Tensor* src, Tensor* dst,
                                    bool src_ready) {
  if (from.connection_ != connection_) {
    return absl::InvalidArgumentError(absl::StrCat("remote copy: the source is on ",
                                                   from.connection_->endpoint(), ", not on ",
                                                   connection_->endpoint()));
  }
  const size_t bytes = src->NumBytes();
  if (bytes != dst->NumBytes()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("remote copy: %d bytes into %d", bytes, dst->NumBytes()));
  }
  TG_RETURN_IF_ERROR(CheckTensorRange(*src, 0, bytes));
  TG_RETURN_IF_ERROR(CheckTensorRange(*dst, 0, bytes));
  pb::SessionRequest request;
  pb::CopyRange* c = request.mutable_copy();
  c->mutable_src()->set_buffer(from.handle_);
  c->mutable_src()->set_offset(from.OffsetOf(*src));
  c->mutable_src()->set_size(bytes);
  c->set_dst_buffer(handle_);
  c->set_dst_offset(OffsetOf(*dst));
  c->set_src_ready(src_ready);
  return connection_->Post(std::move(request));
}

absl::Status RemoteBuffer::CopyFrom(const Tensor* src, Tensor* dst) {
  if (src->buffer == nullptr) return absl::UnimplementedError("copy from a tensor without memory");
  const size_t bytes = src->NumBytes();
  if (bytes != dst->NumBytes()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("remote copy: %d bytes into %d", bytes, dst->NumBytes()));
  }
  TG_RETURN_IF_ERROR(CheckTensorRange(*dst, 0, bytes));
  if (src->buffer->type()->is_host()) return SetTensor(dst, src->data, 0, bytes);
  auto* remote = dynamic_cast<RemoteBuffer*>(src->buffer);
  if (remote == nullptr) return absl::UnimplementedError("copy from a non-host local device");
  TG_RETURN_IF_ERROR(CheckTensorRange(*src, 0, bytes));
  if (remote->connection_ == connection_) {
    // Same server: it copies device to device (or inside one device) itself.
    return PostCopy(*remote, src, dst, /*src_ready=*/false);
  }
  // Another server: this one pulls the bytes straight from it (PeerCopy), never through us.
  // The source's queued work must be done first, and our pull must finish before the source
  // can be overwritten, hence a full round trip on both sides.
  TG_RETURN_IF_ERROR(remote->connection_->Drain());
  TG_ASSIGN_OR_RETURN(std::string grant, remote->connection_->PeerReadGrant(remote->handle_));
  pb::SessionRequest request;
  pb::PeerPull* p = request.mutable_peer_pull();
  p->set_endpoint(remote->connection_->endpoint());
  p->set_grant(std::move(grant));
  p->set_src_offset(remote->OffsetOf(*src));
  p->set_size(bytes);
  p->set_dst_buffer(handle_);
  p->set_dst_offset(OffsetOf(*dst));
  return connection_->Call(std::move(request)).status();
}

absl::Status RemoteBuffer::Clear(uint8_t value) {
  pb::SessionRequest request;
  request.mutable_clear_buffer()->set_buffer(handle_);
  request.mutable_clear_buffer()->set_value(value);
  return connection_->Post(std::move(request));
}

absl::StatusOr<std::vector<LoadStats>> RemoteBuffer::LoadTensors(
    const WeightSource& source, absl::Span<const TensorLoad> loads) {
  absl::flat_hash_map<uint64_t, uint64_t> extent;
  for (const FileExtent& e : source.tensors) extent[e.offset] = e.size;
  std::vector<WeightCopy> copies;  // whole tensors: whole pieces, as the sidecar has them.
  std::vector<RowsCopy> parts;     // slices of tensors: rows of pieces.
  std::vector<const TensorLoad*> part_loads;
  for (const TensorLoad& l : loads) {
    TG_RETURN_IF_ERROR(CheckTensorLoad(source, l));
    TG_RETURN_IF_ERROR(CheckTensorRange2D(*l.tensor, l.rows));
    const StridedRange& r = l.rows;
    const bool contiguous = r.TensorContiguous() && (r.n_rows <= 1 || r.HostStride() == r.row_size);
    const uint64_t bytes = uint64_t{r.n_rows} * r.row_size;
    auto it = extent.find(l.file_offset);
    if (contiguous && it != extent.end() && it->second == bytes) {
      copies.push_back({this, OffsetOf(*l.tensor, r.offset), {l.file_offset, bytes}});
      continue;
    }
    parts.push_back({OffsetOf(*l.tensor, r.offset), l.file_offset, r.row_size, r.n_rows,
                     r.n_rows > 1 ? r.HostStride() : r.row_size,
                     r.n_rows > 1 ? r.stride : r.row_size});
    part_loads.push_back(&l);
  }
  const ModelFileView file = ModelFileViewOf(source);
  ModelUploadOptions options;
  options.progress = false;  // LoadWeights's caller reports progress (source.on_placed).
  options.on_placed = source.on_placed;
  BufferLoad rows_load;
  TG_ASSIGN_OR_RETURN(std::vector<bool> filled,
                      FillRowsFromPieces(file, this, parts, options, &rows_load));
  // What the server did not have: contiguous slices are uploaded as any bytes, rows written.
  std::vector<TensorLoad> rows;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (filled[i]) continue;
    const RowsCopy& p = parts[i];
    if (p.rows == 1) {
      copies.push_back({this, p.buffer_offset, {p.file_offset, p.row_size}});
    } else {
      rows.push_back(*part_loads[i]);
    }
  }
  LoadStats stats{.buffer = this};
  for (size_t i = 0; i < parts.size(); ++i) {
    if (filled[i]) stats.bytes += parts[i].rows * parts[i].row_size;
  }
  stats.from_file = rows_load.from_file;
  stats.hashed = rows_load.hashed;
  stats.cached = rows_load.cached;
  stats.host_file = rows_load.model_file;
  if (!copies.empty()) {
    TG_ASSIGN_OR_RETURN(std::vector<BufferLoad> uploaded,
                        UploadModelWeights(file, copies, options));
    for (const BufferLoad& u : uploaded) {
      stats.bytes += u.bytes;
      stats.sent += u.sent;
      stats.cached += u.cached;
      stats.from_file += u.from_file;
      stats.hashed += u.hashed;
      if (!u.model_file.empty()) stats.host_file = u.model_file;
    }
  }
  TG_ASSIGN_OR_RETURN(std::vector<LoadStats> written, SetTensorLoads(this, source, rows));
  for (const LoadStats& w : written) {
    stats.bytes += w.bytes;
    stats.sent += w.bytes;
  }
  return std::vector<LoadStats>{std::move(stats)};  // LoadWeights times it.
}

}  // namespace tg::rpc
