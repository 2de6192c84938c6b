// SessionBuffer: one buffer a session allocated, with range-checked byte access. Shared
// (shared_ptr) between the session's handle table, in-flight Upload/Download/PeerCopy
// streams and peer grants, so that freeing a handle never pulls memory from under a stream.
//
// Fresh memory may hold what its previous owner (another session) left there. Instead of
// zeroing a new buffer whole, which costs a pass over memory that uploads are about to fill
// (a third of a model's load time), the buffer remembers which bytes no write has reached and
// zeroes those on the first access that could read them: Read, Copy's source, and
// ClearUnwritten, which the session calls before a graph may use the buffer. Writes, Memset
// and ClaimForUpload take their ranges out of that set. Thread-safe: the set has its lock;
// bytes themselves are the callers' to order (the session orders its commands).
#ifndef TENSORGRID_SERVER_SESSION_BUFFER_H_
#define TENSORGRID_SERVER_SESSION_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/backend.h"

namespace tg::server {

class SessionBuffer {
 public:
  // `on_destroy` runs in the destructor (metrics bookkeeping); may be empty.
  SessionBuffer(std::unique_ptr<Buffer> buffer, int device_index, uint64_t size,
                std::function<void(uint64_t)> on_destroy);
  ~SessionBuffer();
  SessionBuffer(const SessionBuffer&) = delete;
  SessionBuffer& operator=(const SessionBuffer&) = delete;

  Buffer* buffer() const { return buffer_.get(); }
  int device_index() const { return device_index_; }
  uint64_t size() const { return size_; }  // what the client asked for (and may address).

  // OUT_OF_RANGE-free: every range error is INVALID_ARGUMENT naming the range and size.
  absl::Status CheckRange(uint64_t offset, uint64_t size) const;
  absl::Status Write(uint64_t offset, const void* data, uint64_t size);
  absl::Status Read(uint64_t offset, void* data, uint64_t size) const;
  absl::Status Memset(uint64_t offset, uint8_t value, uint64_t size);
  // Rows r (host side packed or r.host_stride apart) into / out of the buffer. Every check
  // first: rows that overlap, overflow or end past the buffer are INVALID_ARGUMENT naming
  // the values, and nothing is written.
  absl::Status CheckRows(const StridedRange& r) const;
  absl::Status WriteRows(const StridedRange& r, const void* data);
  absl::Status ReadRows(const StridedRange& r, void* data) const;
  // Host address of byte `offset`, or nullptr when the memory is not host memory. Writing
  // through it needs ClaimForUpload first; reading, ClearUnwritten.
  uint8_t* HostPointer(uint64_t offset) const;

  // An upload is about to fill [offset, +size) (checked by the caller): it no longer needs
  // zeroing. The upload zeroes what it does not fill (UploadSink).
  void ClaimForUpload(uint64_t offset, uint64_t size);
  // Zeroes every byte no write has reached; nothing to do after the first call.
  absl::Status ClearUnwritten() const;

  // Copies [src_offset, +size) of src into [dst_offset, +size) of dst (ranges checked; the
  // same buffer and overlapping ranges are fine).
  static absl::Status Copy(const SessionBuffer& src, uint64_t src_offset, SessionBuffer& dst,
                           uint64_t dst_offset, uint64_t size);

 private:
  // A tensor spanning [offset, offset + size) of the buffer, for the Buffer byte API.
  Tensor Window(uint64_t offset, uint64_t size) const;

  // Takes [offset, +size) out of the unwritten set.
  void MarkWritten(uint64_t offset, uint64_t size);
  // Memset without bookkeeping (the range is checked).
  absl::Status Fill(uint64_t offset, uint8_t value, uint64_t size) const;

  std::unique_ptr<Buffer> buffer_;
  int device_index_;
  uint64_t size_;
  std::function<void(uint64_t)> on_destroy_;
  mutable absl::Mutex mu_;
  mutable std::map<uint64_t, uint64_t> unwritten_ ABSL_GUARDED_BY(mu_);  // start -> end.
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_SESSION_BUFFER_H_
