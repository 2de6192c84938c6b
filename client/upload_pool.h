// UploadPool: a few threads that push queued byte ranges to one rpc-server over parallel
// Upload streams, off the caller's thread, with a bound on the bytes it holds copies of and
// running totals (for load reports and progress lines).
// Thread-safe.
#ifndef TENSORGRID_CLIENT_UPLOAD_POOL_H_
#define TENSORGRID_CLIENT_UPLOAD_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/content_hash.h"

namespace tg::rpc {

// What running a job did: bytes sent, bytes the server had in its cache, bytes it read from
// its own copy of the model file.
struct UploadResult {
  uint64_t sent = 0;
  uint64_t skipped = 0;
  uint64_t from_file = 0;
};

struct UploadJob {
  uint64_t buffer = 0;
  uint64_t offset = 0;
  // The bytes: an owned copy when the caller's memory may go away before the upload runs
  // (Connection::Upload), else `borrowed` (a mapped model file) that the caller keeps valid
  // until the pool's Wait returns.
  std::string bytes;
  const uint8_t* borrowed = nullptr;
  size_t borrowed_size = 0;
  bool cacheable = false;  // send the SHA-256 (the server may have the bytes; it verifies them).
  std::optional<Sha256Digest> digest;  // known already (a .tghash sidecar); else computed.
  // Not cacheable: the server hashes the bytes and stores them in its cache (an empty one:
  // nothing to look up, so nothing to hash here). Connection::StoresUnhashed servers only.
  bool store = false;
  // With the digest: the piece at file_offset of the model file the server gave this handle
  // for (OpenModelFile), so that it may read the bytes from its own copy.
  uint64_t model_file = 0;
  uint64_t file_offset = 0;
  // FillPieces only, on servers of protocol minor kMinorPieceRegions: the bytes above are the
  // whole piece at file_offset (hashed and proven whole), of which only these rows are
  // written, from `offset` on (UploadHeader.region).
  struct Rows {
    uint64_t offset = 0;  // of row 0 in the piece.
    uint64_t row_size = 0;
    uint64_t rows = 0;
    uint64_t stride = 0;         // in the piece.
    uint64_t buffer_stride = 0;  // in the buffer.
  };
  std::optional<Rows> region;
  // Called on the pool's thread once the job has run without error (load reports).
  std::function<void(const UploadResult&)> on_done;
  // Called when the given `digest` turned out not to be the bytes' (a stale sidecar): the
  // server refused the bytes, and the job was sent again with their real digest.
  std::function<void()> on_stale_digest;

  const uint8_t* data() const {
    return borrowed != nullptr ? borrowed : reinterpret_cast<const uint8_t*>(bytes.data());
  }
  size_t size() const { return borrowed != nullptr ? borrowed_size : bytes.size(); }
  // Bytes the job puts in the buffer: size(), or the region's rows.
  uint64_t written() const { return region ? region->rows * region->row_size : size(); }
};

// The pool's work since it was made (callers take differences).
struct UploadStats {
  uint64_t queued = 0;   // bytes of the jobs added.
  uint64_t done = 0;     // bytes of the jobs finished.
  UploadResult result;   // how the finished ones went.
  absl::Time last_done;  // when the last one finished.
};

class UploadPool {
 public:
  using Runner = std::function<absl::StatusOr<UploadResult>(const UploadJob&)>;

  UploadPool(int n_threads, Runner runner);
  ~UploadPool();

  // Queues a job; blocks while more than kMaxOwnedBytes of copies are queued or running.
  // Returns the first error of an earlier job (the pool then refuses new work).
  absl::Status Add(UploadJob job);
  // Waits for every queued job; returns the first error, if any (and clears it).
  absl::Status Wait();
  // Counts a job that was done without the pool (Connection::FillPieces) in stats().
  void RecordDone(uint64_t bytes, const UploadResult& result);
  UploadStats stats() const;

 private:
  static constexpr uint64_t kMaxOwnedBytes = uint64_t{256} << 20;
  void Work();
  void Account(uint64_t bytes, const UploadResult& result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Runner runner_;
  mutable absl::Mutex mu_;
  std::deque<UploadJob> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t owned_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // of copies queued or running.
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  UploadStats stats_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

}  // namespace tg::rpc

#endif  // TENSORGRID_CLIENT_UPLOAD_POOL_H_
