// Memory on a remote device: a buffer handle in the server's session. Tensor addresses are
// offsets from a fake base (never dereferenced); weights (LoadTensors) go through the hashed,
// parallel upload path (client/model_upload.h) so that a server's cache or its own copy of
// the model file can fill them, small writes ride the session stream without a round trip.
#ifndef TENSORGRID_CLIENT_REMOTE_BUFFER_H_
#define TENSORGRID_CLIENT_REMOTE_BUFFER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client/connection.h"
#include "core/backend.h"

namespace tg::rpc {

class RemoteDevice;

class RemoteBufferType : public BufferType {
 public:
  RemoteBufferType(RemoteDevice* device, std::string name, size_t alignment, size_t max_size);
  absl::string_view name() const override { return name_; }
  Device* device() const override;
  RemoteDevice* remote_device() const { return device_; }
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override;
  size_t alignment() const override { return alignment_; }
  size_t max_size() const override { return max_size_; }
  bool is_host() const override { return false; }

 private:
  RemoteDevice* device_;
  std::string name_;
  size_t alignment_;
  size_t max_size_;
};

class RemoteBuffer : public BasicBuffer {
 public:
  RemoteBuffer(RemoteBufferType* type, Connection* connection, uint64_t handle, size_t size);
  ~RemoteBuffer() override;
  absl::Status SetTensor(Tensor* t, const void* data, size_t offset, size_t size) override;
  absl::Status GetTensor(const Tensor* t, void* data, size_t offset, size_t size) override;
  absl::Status MemsetTensor(Tensor* t, uint8_t value, size_t offset, size_t size) override;
  // A view in one message per kInlineWriteBytes of rows (WriteRows/ReadRows), when the
  // server speaks them (HelloReply.protocol_minor); rows back to back in the tensor go as
  // one plain write/read; otherwise Buffer's row loop.
  absl::Status SetTensor2D(Tensor* t, const void* data, const StridedRange& r) override;
  absl::Status GetTensor2D(const Tensor* t, void* data, const StridedRange& r) override;
  absl::Status CopyFrom(const Tensor* src, Tensor* dst) override;
  absl::Status Clear(uint8_t value) override;
  // Whole tensors through UploadModelWeights: the server fills what its --model-dir copy of the
  // file or its cache holds (the .tghash sidecar's hashes name the pieces), the rest is sent.
  // Slices of tensors (a device's share under --split-mode tensor) through
  // FillRowsFromPieces (client/piece_rows.h): the server cuts them from the pieces it has;
  // what it has not is sent (rows apart as SetTensor2D).
  absl::StatusOr<std::vector<LoadStats>> LoadTensors(const WeightSource& source,
                                                     absl::Span<const TensorLoad> loads) override;

  uint64_t handle() const { return handle_; }
  Connection* connection() const { return connection_; }
  // Byte offset of t's data (plus `offset`) inside this buffer.
  uint64_t OffsetOf(const Tensor& t, size_t offset = 0) const;
  // Posts a Read of `size` bytes (at most kInlineWriteBytes) at byte `at` of this buffer,
  // in order behind what was sent before; its reply is copied into `data` when it is
  // collected (the next Drain or WaitFor that reaches it).
  absl::Status PostRead(uint64_t at, void* data, size_t size);
  // Posts a Copy of src (in `from`, a buffer of the same server) into dst (in this buffer),
  // which the server runs in order behind the work of dst's device and, unless src_ready
  // (the caller has seen src's writers finish), of src's device too.
  absl::Status PostCopy(const RemoteBuffer& from, const Tensor* src, Tensor* dst, bool src_ready);

 private:
  // True when the server takes WriteRows/ReadRows.
  bool ServerHasRows() const;
  // Posts ReadRows for rows [first, first + n) of r, whose row 0 is at byte `at` of this
  // buffer; the reply fills them in `data` (r's host layout).
  absl::Status PostReadRows(uint64_t at, const StridedRange& r, size_t first, size_t n, void* data);

  RemoteBufferType* remote_type() const { return static_cast<RemoteBufferType*>(type()); }

  Connection* connection_;
  uint64_t handle_;
};

// Writes up to this size go inline on the session stream; larger ones use Upload.
inline constexpr size_t kInlineWriteBytes = size_t{1} << 20;

}  // namespace tg::rpc

#endif  // TENSORGRID_CLIENT_REMOTE_BUFFER_H_
