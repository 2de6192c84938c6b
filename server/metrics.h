// Metrics: rpc-server's Prometheus metrics (prometheus-cpp registry) and, when a port is
// given, the HTTP exposer serving them at /metrics. Thread-safe.
#ifndef TENSORGRID_SERVER_METRICS_H_
#define TENSORGRID_SERVER_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace prometheus {
class Counter;
class Exposer;
class Gauge;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace tg::server {

class Metrics {
 public:
  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Serves /metrics on host:port (port 0 picks a free one); UNAVAILABLE when it cannot bind.
  // With a `token`, a request without `Authorization: Bearer <token>` is answered 401 (the
  // token compared in constant time). Each connection gets kExposerThreads workers to share
  // and kExposerRequestTimeout to send its request: connections that open and send nothing
  // (half-open) hold a worker that long at most, and never the whole exposer.
  absl::Status StartExposer(const std::string& host, int port, const std::string& token = "");
  // Worker threads of the exposer (civetweb: one per connection being served).
  static constexpr int kExposerThreads = 16;
  // How long a connection may take to send its request, or to take the reply.
  static constexpr absl::Duration kExposerRequestTimeout = absl::Seconds(1);
  int exposer_port() const { return exposer_port_; }  // 0 when not serving.
  // Stops serving /metrics, within milliseconds (the destructor calls it). Not concurrently
  // with StartExposer.
  void StopExposer();

  void SessionOpened();
  void SessionClosed();
  void BufferAllocated(uint64_t bytes);
  void BufferFreed(uint64_t bytes);
  // The server memory budget (ServerMemoryBudget; 0 = none) and changes of what all sessions
  // hold against it: the gauges tg_mem_budget_bytes and tg_mem_held_bytes.
  void SetMemBudget(uint64_t bytes);
  void MemHeldChanged(double delta_bytes);
  void Request(int code);  // absl::StatusCode of a session command's reply.
  void UploadBytes(uint64_t bytes);
  void CacheHitBytes(uint64_t bytes);
  void DownloadBytes(uint64_t bytes);
  void ComputeRun();
  void PeerCopyBytes(uint64_t bytes);
  // Pieces peers delivered that wait in a mailbox (tg_peer_mailbox_bytes) grew or shrank.
  void PeerMailboxBytes(double delta_bytes);
  double peer_mailbox_bytes() const;
  void SetCacheBytes(uint64_t bytes);
  // Weight bytes read from --model-dir files into buffers (none of them crossed the network).
  void ModelFileBytes(uint64_t bytes);
  void SetModelDirFiles(uint64_t files);
  // The calls that load bytes into buffers: an Upload stream (one piece), or a FillPieces call
  // (many pieces the server has).
  enum class UploadCall { kUpload, kFillPieces };
  // Such a call began / ended: tg_upload_calls_total{call} counts them, and
  // tg_upload_seconds_total the wall time during which at least one was open (a client's load
  // time, whatever the number of streams).
  void UploadStarted(UploadCall call) ABSL_LOCKS_EXCLUDED(mu_);
  void UploadFinished() ABSL_LOCKS_EXCLUDED(mu_);

  // Current values (tests, logs).
  double sessions_active() const;
  double buffers() const;
  double buffer_bytes() const;
  double mem_held_bytes() const;
  double upload_bytes() const;
  double cache_hit_bytes() const;
  double model_file_bytes() const;
  double upload_seconds() const;
  double upload_calls(UploadCall call) const;
  // The text exposition format of everything (what /metrics returns).
  std::string Serialize() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string exposer_host_;
  int exposer_port_ = 0;
  bool exposer_token_ = false;  // exposer_port_ is in the process-wide table of tokens.
  prometheus::Gauge* sessions_active_;
  prometheus::Gauge* buffers_;
  prometheus::Gauge* buffer_bytes_;
  prometheus::Gauge* cache_bytes_;
  prometheus::Gauge* mem_budget_;
  prometheus::Gauge* mem_held_;
  prometheus::Counter* sessions_total_;
  prometheus::Counter* upload_bytes_;
  prometheus::Counter* cache_hit_bytes_;
  prometheus::Counter* download_bytes_;
  prometheus::Counter* compute_total_;
  prometheus::Counter* peer_copy_bytes_;
  prometheus::Gauge* peer_mailbox_bytes_;
  prometheus::Counter* model_file_bytes_;
  prometheus::Gauge* model_dir_files_;
  prometheus::Counter* upload_seconds_;
  prometheus::Counter* upload_calls_;  // call="upload"
  prometheus::Counter* fill_calls_;    // call="fill_pieces"
  prometheus::Counter* Calls(UploadCall call) const {
    return call == UploadCall::kUpload ? upload_calls_ : fill_calls_;
  }
  prometheus::Family<prometheus::Counter>* requests_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, prometheus::Counter*> requests_by_code_ ABSL_GUARDED_BY(mu_);
  int uploads_open_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time uploads_since_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_METRICS_H_
