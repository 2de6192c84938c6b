// SessionBuffer: one buffer a session allocated, with range-checked byte access. Shared
// (shared_ptr) between the session's handle table, in-flight Upload/Download/PeerCopy
// streams and peer grants, so that freeing a handle never pulls memory from under a stream.
//
// Fresh memory may hold what its previous owner (another session) left there. Instead of
// zeroing a new buffer whole, which costs a pass over memory that uploads are about to fill
// (a third of a model's load time), the buffer remembers which bytes no write has reached and
// zeroes those on the first access that could read them: Read, Copy's source, and
// ClearUnwritten, which the session calls before a graph may use the buffer.
//
// Every write goes through a Fill: it takes the unwritten part of its range out of the set
// while it copies, and gives it back unless Done() says the bytes landed. A range counts as
// written only once this session's bytes are in it, so a read racing an upload sees zeros or
// the upload's bytes, never a previous owner's: ClearUnwritten zeroes what is unwritten and
// waits for the Fills in flight. An upload therefore marks its range chunk by chunk, as the
// chunks land. Thread-safe: the set has its lock; bytes themselves are the callers' to order
// (the session orders its commands).
#ifndef TENSORGRID_SERVER_SESSION_BUFFER_H_
#define TENSORGRID_SERVER_SESSION_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/backend.h"
#include "server/command_progress.h"
#include "server/session_buffer_prefault.h"
#include "server/session_buffer_recycler.h"

namespace tg::server {

class SessionBuffer {
 public:
  // `on_destroy` runs in the destructor (metrics bookkeeping); may be empty. `progress`
  // (optional) is the owning session's, for peers reading the buffer after a command of it.
  // `recycler` (optional) keeps the memory when the buffer goes, for the next session's
  // buffer of this size; `recycled` says the memory came from it (its pages are mapped in
  // already: no prefault).
  SessionBuffer(std::unique_ptr<Buffer> buffer, int device_index, uint64_t size,
                std::function<void(uint64_t)> on_destroy,
                std::shared_ptr<const CommandProgress> progress = nullptr,
                std::shared_ptr<SessionBufferRecycler> recycler = nullptr, bool recycled = false);
  ~SessionBuffer();
  SessionBuffer(const SessionBuffer&) = delete;
  SessionBuffer& operator=(const SessionBuffer&) = delete;

  Buffer* buffer() const { return buffer_.get(); }
  int device_index() const { return device_index_; }
  uint64_t size() const { return size_; }  // what the client asked for (and may address).
  // The owning session's command progress (null when not given).
  const std::shared_ptr<const CommandProgress>& progress() const { return progress_; }

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
  // through it needs a Fill of the range first; reading, ClearUnwritten.
  uint8_t* HostPointer(uint64_t offset) const;

  // The right to write [offset, +size) (checked by the caller) while it lives. Its unwritten
  // part is taken out of the set, so ClearUnwritten neither zeroes it under the writer nor
  // lets a reader past it until the Fill ends; Done() keeps it as written, otherwise it goes
  // back to the set and is zeroed before any read (a failed or refused fill). Must end before
  // its thread reads this buffer. Movable, not copyable.
  class Fill {
   public:
    Fill(Fill&& other) noexcept;
    Fill& operator=(Fill&&) = delete;
    Fill(const Fill&) = delete;
    Fill& operator=(const Fill&) = delete;
    ~Fill();
    // The range holds this session's bytes.
    void Done() { done_ = true; }

   private:
    friend class SessionBuffer;
    Fill(const SessionBuffer* buffer, std::vector<std::pair<uint64_t, uint64_t>> taken)
        : buffer_(buffer), taken_(std::move(taken)) {}
    const SessionBuffer* buffer_;                       // null once moved from.
    std::vector<std::pair<uint64_t, uint64_t>> taken_;  // [start, end) taken from the set.
    bool done_ = false;
  };
  Fill BeginFill(uint64_t offset, uint64_t size);

  // Zeroes every byte no write has reached and waits for the Fills in flight; nothing to do
  // once every byte was written.
  absl::Status ClearUnwritten() const;

  // Copies [src_offset, +size) of src into [dst_offset, +size) of dst (ranges checked; the
  // same buffer and overlapping ranges are fine).
  static absl::Status Copy(const SessionBuffer& src, uint64_t src_offset, SessionBuffer& dst,
                           uint64_t dst_offset, uint64_t size);

 private:
  // A tensor spanning [offset, offset + size) of the buffer, for the Buffer byte API.
  Tensor Window(uint64_t offset, uint64_t size) const;

  // Memset without bookkeeping (the range is checked).
  absl::Status SetBytes(uint64_t offset, uint8_t value, uint64_t size) const;
  // A Fill ended: `taken` goes back to the unwritten set unless `done`.
  void EndFill(const std::vector<std::pair<uint64_t, uint64_t>>& taken, bool done) const;
  bool NoFillsInFlight() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return fills_ == 0; }

  std::unique_ptr<Buffer> buffer_;
  int device_index_;
  uint64_t size_;
  std::function<void(uint64_t)> on_destroy_;
  std::shared_ptr<const CommandProgress> progress_;
  std::shared_ptr<SessionBufferRecycler> recycler_;
  mutable absl::Mutex mu_;
  mutable std::map<uint64_t, uint64_t> unwritten_ ABSL_GUARDED_BY(mu_);  // start -> end.
  mutable int fills_ ABSL_GUARDED_BY(mu_) = 0;  // Fills in flight that took unwritten bytes.
  // Declared last: destroyed (stopped) first, before buffer_ frees the memory.
  std::unique_ptr<BackgroundPrefault> prefault_;
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_SESSION_BUFFER_H_
