// UploadPool: a few threads that push queued byte ranges to one rpc-server over parallel
// Upload streams, hashing them off the caller's thread, with a bound on bytes in flight and
// an optional progress line (MB, MB/s, bytes skipped by the server's cache) on a terminal.
#ifndef TENSORGRID_CLIENT_UPLOAD_POOL_H_
#define TENSORGRID_CLIENT_UPLOAD_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tg::rpc {

struct UploadJob {
  uint64_t buffer = 0;
  uint64_t offset = 0;
  std::string bytes;  // owned copy: callers' memory may go away before the upload runs.
  bool cacheable = false;
};

// What running a job did: bytes sent and bytes the server already had.
struct UploadResult {
  uint64_t sent = 0;
  uint64_t skipped = 0;
};

class UploadPool {
 public:
  using Runner = std::function<absl::StatusOr<UploadResult>(const UploadJob&)>;

  UploadPool(int n_threads, Runner runner, std::string label, bool progress);
  ~UploadPool();

  // Queues a job; blocks while more than kMaxInFlightBytes are queued or running. Returns
  // the first error of an earlier job (the pool then refuses new work).
  absl::Status Add(UploadJob job);
  // Waits for every queued job; returns the first error, if any (and clears it).
  absl::Status Wait();

 private:
  static constexpr uint64_t kMaxInFlightBytes = uint64_t{256} << 20;
  void Work();
  void ReportLocked(bool final) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Runner runner_;
  const std::string label_;
  const bool progress_;
  absl::Mutex mu_;
  std::deque<UploadJob> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t in_flight_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  // Progress of the current burst (since the pool was last idle).
  uint64_t burst_total_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t burst_done_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t burst_skipped_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time burst_start_ ABSL_GUARDED_BY(mu_);
  absl::Time last_report_ ABSL_GUARDED_BY(mu_);
  bool reported_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace tg::rpc

#endif  // TENSORGRID_CLIENT_UPLOAD_POOL_H_
