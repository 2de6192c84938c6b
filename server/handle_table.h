// HandleTable: the buffers one rpc-server session holds behind opaque handles, the model
// files it opened (OpenModelFile), and the accounting of what the session makes the server
// hold: every byte is charged against the session's memory limit (--session-mem-limit), its
// client's and the server-wide budget, and the buffers are capped in number
// (--max-buffers-per-session). A buffer's charge goes in with it (Insert) and comes back with
// it (Remove, Clear). Handles are a keyed bijection of a counter: unique within the session,
// different across sessions, never an address.
// Thread-safety: thread-safe. The handle maps are guarded by one mutex; the byte count is an
// atomic. Checking the cap and inserting are two calls: a caller that needs them to agree
// (Session's command dispatch) serializes its allocations.
#ifndef TENSORGRID_SERVER_HANDLE_TABLE_H_
#define TENSORGRID_SERVER_HANDLE_TABLE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/memory_reservation.h"
#include "server/session_buffer.h"

namespace tg::server {

// Buffers one session may hold at most, by default (--max-buffers-per-session): far above
// what a model needs (a few per layer and device), and a bound on the bookkeeping that
// zero-byte buffers would otherwise grow without charge.
inline constexpr uint64_t kDefaultMaxBuffersPerSession = 65536;
// What every buffer is charged at least, whatever its size: its bookkeeping (the
// SessionBuffer, the backend's buffer object and its smallest allocation, the handle table
// slot), about 470 bytes resident per buffer measured on a CPU device
// (tests/hostile/memory_test.py --case zero_byte_buffers).
inline constexpr uint64_t kMinBufferCharge = 512;

// What a buffer of `size` bytes is charged against the session limit and the server budget.
uint64_t BufferCharge(uint64_t size);

class HandleTable {
 public:
  struct Limits {
    uint64_t mem_limit = 0;                               // bytes per session; 0 = no limit.
    ServerMemoryBudget* budget = nullptr;                 // charged too where set.
    ClientAccount* client = nullptr;                      // likewise (--client-mem-limit).
    uint64_t max_buffers = kDefaultMaxBuffersPerSession;  // 0 = no cap.
    // Tests and the fuzzer only: handles are 1, 2, 3, ...
    bool predictable_handles = false;
  };
  explicit HandleTable(const Limits& limits);
  // Gives back the charges of the buffers still held (as Clear).
  ~HandleTable();
  HandleTable(const HandleTable&) = delete;
  HandleTable& operator=(const HandleTable&) = delete;

  // Charges `size` bytes against the session's memory limit, its client's and the server's
  // budget: RESOURCE_EXHAUSTED naming the numbers and the flag when it would pass any. The bytes
  // go back when the reservation is dropped, unless committed (then whoever holds the memory
  // gives them back with ReleaseMemory).
  absl::StatusOr<MemoryReservation> ReserveMemory(uint64_t size);
  void ReleaseMemory(uint64_t size);
  uint64_t bytes_held() const { return bytes_held_.load(); }

  // Room for one more buffer of `size` bytes: RESOURCE_EXHAUSTED naming the count and
  // --max-buffers-per-session at the cap, then its charge (BufferCharge) reserved.
  absl::StatusOr<MemoryReservation> ReserveBuffer(uint64_t size) ABSL_LOCKS_EXCLUDED(mu_);
  // Files `buffer` under a new handle and commits `charge` (from ReserveBuffer): the bytes
  // go back when Remove or Clear drops the buffer.
  uint64_t Insert(std::shared_ptr<SessionBuffer> buffer, MemoryReservation charge)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The buffer behind a handle, kept alive while the caller holds it; NOT_FOUND otherwise.
  absl::StatusOr<std::shared_ptr<SessionBuffer>> Find(uint64_t handle) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Takes the buffer out of the table and gives its charge back; NOT_FOUND as Find. The
  // memory goes when the last holder (a stream, a queued command) lets go.
  absl::StatusOr<std::shared_ptr<SessionBuffer>> Remove(uint64_t handle) ABSL_LOCKS_EXCLUDED(mu_);
  // Takes every buffer out and gives their charges back; the caller drops them.
  std::vector<std::shared_ptr<SessionBuffer>> Clear() ABSL_LOCKS_EXCLUDED(mu_);
  size_t buffer_count() const ABSL_LOCKS_EXCLUDED(mu_);

  // Records that the session opened index file `file` (ModelIndex).
  void AddModelFile(uint64_t file) ABSL_LOCKS_EXCLUDED(mu_);
  // `handle` when the session opened that file; NOT_FOUND otherwise.
  absl::StatusOr<uint64_t> ModelFile(uint64_t handle) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  uint64_t NextHandle() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Limits limits_;
  const uint64_t handle_key_;   // random: handles of different sessions differ.
  const uint64_t handle_mult_;  // random odd multiplier.
  std::atomic<uint64_t> bytes_held_{0};

  mutable absl::Mutex mu_;
  uint64_t next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, std::shared_ptr<SessionBuffer>> buffers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> model_files_ ABSL_GUARDED_BY(mu_);  // opened index ids.
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_HANDLE_TABLE_H_
