// Session: everything one client connection owns on rpc-server (buffers behind opaque
// handles, decoded graphs, per-device streams, peer grants) and the implementation of every
// Session-stream command, independent of gRPC so that tests and the fuzzer drive it
// directly. Destroying a session frees all it holds.
// Thread-safety: Handle() calls are serialized internally; FindBuffer() and the byte
// counters may be used concurrently from Upload/Download threads.
#ifndef TENSORGRID_SERVER_SESSION_H_
#define TENSORGRID_SERVER_SESSION_H_

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/backend.h"
#include "server/graph_decoder.h"
#include "server/session_buffer.h"
#include "tensorgrid/v1/tensorgrid.pb.h"

namespace tg::server {

class CollectiveRunner;
class GrantTable;
class Metrics;
class PeerClient;

// What a session needs from the server; everything but `devices` may be null/0.
struct SessionEnv {
  std::vector<Device*> devices;  // index = AllocBuffer.device / Compute.device.
  uint64_t mem_limit = 0;        // bytes per session; 0 = no limit.
  Metrics* metrics = nullptr;
  GrantTable* grants = nullptr;             // GrantPeerRead is UNIMPLEMENTED without it.
  PeerClient* peers = nullptr;              // PeerPull is UNIMPLEMENTED without it.
  CollectiveRunner* collectives = nullptr;  // AllReduce is UNIMPLEMENTED without it.
  // Tests and the fuzzer only: handles are 1, 2, 3, ... so that scripted command sequences
  // can name them. A server never sets this.
  bool predictable_handles = false;
};

// Decoded graphs kept per session (least recently used dropped first).
inline constexpr size_t kGraphCacheSize = 32;
// A BatchReply message is sent once its replies reach this size.
inline constexpr size_t kMaxBatchReplyBytes = size_t{4} << 20;

class Session {
 public:
  Session(std::string id, SessionEnv env);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const std::string& id() const { return id_; }
  // The id's first characters, for log lines: enough to tell sessions apart, not the whole
  // id, which (with the bearer token) is what Upload and Download accept as the session.
  std::string log_id() const;

  // Runs one command. Errors come back in the reply (code + message); the session stays
  // usable after any error. A batch is refused here (INVALID_ARGUMENT): see Serve.
  tensorgrid::v1::SessionReply Handle(const tensorgrid::v1::SessionRequest& request)
      ABSL_LOCKS_EXCLUDED(handle_mu_);
  // Runs a request as it came off the Session stream, one command or a batch of them in
  // order, and hands each reply message to `send`: a batch's replies go in BatchReply
  // messages of consecutive replies, each up to kMaxBatchReplyBytes unless one reply alone
  // is larger. Returns false as soon as `send` does (the stream is gone).
  bool Serve(const tensorgrid::v1::SessionRequest& request,
             absl::FunctionRef<bool(const tensorgrid::v1::SessionReply&)> send)
      ABSL_LOCKS_EXCLUDED(handle_mu_);

  // The buffer behind a handle, kept alive while the caller holds it; NOT_FOUND otherwise.
  absl::StatusOr<std::shared_ptr<SessionBuffer>> FindBuffer(uint64_t handle) const
      ABSL_LOCKS_EXCLUDED(table_mu_);

  void AddUploadedBytes(uint64_t n) { uploaded_bytes_ += n; }
  void AddCacheHitBytes(uint64_t n) { cache_hit_bytes_ += n; }
  uint64_t bytes_held() const { return bytes_held_.load(); }
  size_t buffer_count() const ABSL_LOCKS_EXCLUDED(table_mu_);

 private:
  struct CachedGraph {
    uint32_t device;
    uint64_t key;
    std::unique_ptr<DecodedGraph> graph;
  };

  absl::Status DoCommand(const tensorgrid::v1::SessionRequest& request,
                         tensorgrid::v1::SessionReply* reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(handle_mu_);
  absl::Status Alloc(const tensorgrid::v1::AllocBuffer& cmd,
                     tensorgrid::v1::AllocBufferReply* reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(handle_mu_);
  absl::Status Free(uint64_t handle) ABSL_EXCLUSIVE_LOCKS_REQUIRED(handle_mu_);
  absl::Status RunCompute(const tensorgrid::v1::Compute& cmd, tensorgrid::v1::ComputeReply* reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(handle_mu_);
  absl::Status Grant(uint64_t handle, tensorgrid::v1::GrantPeerReadReply* reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(handle_mu_);
  absl::StatusOr<Device*> DeviceAt(uint32_t index) const;
  absl::StatusOr<Stream*> StreamFor(uint32_t device) ABSL_EXCLUSIVE_LOCKS_REQUIRED(handle_mu_);
  uint64_t NextHandle() ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_mu_);

  const std::string id_;
  const SessionEnv env_;
  const uint64_t handle_key_;   // random: handles of different sessions differ.
  const uint64_t handle_mult_;  // random odd multiplier.

  absl::Mutex handle_mu_;                                      // serializes Handle().
  std::list<CachedGraph> graphs_ ABSL_GUARDED_BY(handle_mu_);  // front: most recent.
  absl::flat_hash_map<uint32_t, std::unique_ptr<Stream>> streams_ ABSL_GUARDED_BY(handle_mu_);
  absl::flat_hash_map<uint64_t, std::string> grants_ ABSL_GUARDED_BY(handle_mu_);

  mutable absl::Mutex table_mu_;
  uint64_t next_handle_ ABSL_GUARDED_BY(table_mu_) = 1;
  absl::flat_hash_map<uint64_t, std::shared_ptr<SessionBuffer>> buffers_ ABSL_GUARDED_BY(table_mu_);

  std::atomic<uint64_t> bytes_held_{0};
  std::atomic<uint64_t> uploaded_bytes_{0};
  std::atomic<uint64_t> cache_hit_bytes_{0};
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_SESSION_H_
