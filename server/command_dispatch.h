// CommandDispatch: runs the commands of one rpc-server session's requests. Each command is
// checked, its handles looked up (HandleTable) and its graph decoded (GraphCache) in request
// order on the calling thread; the work on device memory then runs on the lane of the device
// it touches (server/device_lanes.h: one thread per device, a copy between two devices on
// both), so that devices compute at the same time while each device's commands, and any two
// commands sharing a buffer, keep their order. A session whose buffers are all on one device
// runs everything on the calling thread, as a one-lane session would, without the hand-off.
// Consecutive PeerPulls of a batch into disjoint bytes run at the same time. Each reply is
// filed with the request's ReplySequencer, which sends them in request order. The dispatch
// also holds the session's peer grants (GrantPeerRead, AwaitPush) and device streams.
// Thread-safety: Run/RunOne/Refuse/Close are serialized by an internal mutex, which guards
// the grants and the lane mode; lane tasks touch only what they captured (shared buffers and
// graphs, their own reply), the stream of their own device (streams_[d] is used by one lane
// at a time, or by the calling thread before lanes start) and thread-safe counters. Drain may
// be called from any thread.
#ifndef TENSORGRID_SERVER_COMMAND_DISPATCH_H_
#define TENSORGRID_SERVER_COMMAND_DISPATCH_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/backend.h"
#include "server/command_progress.h"
#include "server/device_lanes.h"
#include "server/graph_cache.h"
#include "server/handle_table.h"
#include "server/reply_sequencer.h"
#include "server/session_buffer.h"
#include "tensorgrid/v1/tensorgrid.pb.h"

namespace tg::server {

class BlobCache;
class CollectiveRunner;
class GrantTable;
class MailboxAccount;
class Metrics;
class ModelIndex;
class PeerClient;
class PeerPushes;
class SessionBufferRecycler;

// Consecutive PeerPulls of a batch run at the same time, this many at most (one thread each):
// a layer boundary between servers is a few pulls per decode step.
inline constexpr int kMaxPullsAtOnce = 8;

// Bytes a session's buffers received other than inline, by road (CacheStats). Thread-safe.
struct TransferCounters {
  std::atomic<uint64_t> uploaded{0};
  std::atomic<uint64_t> cache_hit{0};
  std::atomic<uint64_t> model_file{0};
};

class CommandDispatch {
 public:
  // What the commands run against; everything but `devices`, `table`, `graphs`, `progress`,
  // `counters` and `cancelled` may be null. All of it outlives the dispatch.
  struct Env {
    std::string session_id;
    std::string log_id;            // the id's first characters, for log lines.
    std::vector<Device*> devices;  // index = AllocBuffer.device / Compute.device.
    HandleTable* table = nullptr;
    GraphCache* graphs = nullptr;
    // Shared with the buffers (SessionBuffer::progress), which peers may hold past the session.
    std::shared_ptr<CommandProgress> progress;
    const TransferCounters* counters = nullptr;
    // True once the session is cancelled: commands not yet started are answered CANCELLED.
    std::function<bool()> cancelled;
    Metrics* metrics = nullptr;
    GrantTable* grants = nullptr;                     // GrantPeerRead is UNIMPLEMENTED without it.
    PeerClient* peers = nullptr;                      // PeerPull is UNIMPLEMENTED without it.
    ModelIndex* models = nullptr;                     // OpenModelFile is NOT_FOUND without it.
    const BlobCache* cache = nullptr;                 // CacheStats says 0 blobs without it.
    CollectiveRunner* collectives = nullptr;          // AllReduce is UNIMPLEMENTED without it.
    std::shared_ptr<SessionBufferRecycler> recycler;  // none kept without it.
    PeerPushes* pushes = nullptr;  // PeerPush and AwaitPush are UNIMPLEMENTED without it.
  };
  explicit CommandDispatch(Env env);
  CommandDispatch(const CommandDispatch&) = delete;
  CommandDispatch& operator=(const CommandDispatch&) = delete;

  // Checks and queues the commands of `request` (one command or a batch, in order), each
  // reply filed in a group `replies` opens for the request. `replies` must outlive the
  // commands (Drain).
  void Run(std::shared_ptr<const tensorgrid::v1::SessionRequest> request, ReplySequencer* replies)
      ABSL_LOCKS_EXCLUDED(mu_);
  // As Run, but `request` is one command even when it carries a batch (which it refuses).
  void RunOne(std::shared_ptr<const tensorgrid::v1::SessionRequest> request,
              ReplySequencer* replies) ABSL_LOCKS_EXCLUDED(mu_);
  // Answers request `id` with `status`, in order with the requests run before it.
  void Refuse(uint64_t id, const absl::Status& status, ReplySequencer* replies)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until every command queued so far has finished.
  void Drain() { lanes_.Drain(); }
  // Drops the device streams, revokes the grants and closes their mailbox (nothing peers
  // deliver reaches the session after). Call after Drain, with no command running.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // The part of a command that touches device memory, and the lanes it runs on; a command
  // done by its checks alone has no lanes.
  struct Work {
    std::vector<int> lanes;
    absl::AnyInvocable<absl::Status(tensorgrid::v1::SessionReply*)> run;
  };

  // Checks one command, queues its work and files its reply in slot i of `group`.
  void Dispatch(std::shared_ptr<const tensorgrid::v1::SessionRequest> message,
                const tensorgrid::v1::SessionRequest& command, ReplySequencer* replies,
                ReplySequencer::Group* group, int i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How many commands of a batch from `first` on are PeerPulls into disjoint bytes (at most
  // kMaxPullsAtOnce): they run at the same time (DispatchPulls).
  int PullRun(const tensorgrid::v1::SessionRequest& batch, int first) const;
  // Dispatch for commands [first, first + n) of a batch that PullRun grouped.
  void DispatchPulls(std::shared_ptr<const tensorgrid::v1::SessionRequest> message, int first,
                     int n, ReplySequencer* replies, ReplySequencer::Group* group)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Turns a command's status into its reply (code, message, metrics).
  void Finish(const tensorgrid::v1::SessionRequest& command, const absl::Status& status,
              tensorgrid::v1::SessionReply* reply) const;
  // The checks of a command, in order; what touches device memory comes back as Work.
  absl::StatusOr<Work> Prepare(const tensorgrid::v1::SessionRequest& request,
                               tensorgrid::v1::SessionReply* reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Work on the lane of `buf`'s device.
  Work OnLaneOf(const SessionBuffer& buf,
                absl::AnyInvocable<absl::Status(tensorgrid::v1::SessionReply*)> run) const;
  absl::Status Alloc(const tensorgrid::v1::AllocBuffer& cmd,
                     tensorgrid::v1::AllocBufferReply* reply) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Free(uint64_t handle) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A PeerPush: its pieces read on their buffers' lanes, then delivered.
  absl::StatusOr<Work> PreparePush(const tensorgrid::v1::PeerPush& cmd)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Work> PrepareCompute(const tensorgrid::v1::Compute& cmd)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A Compute's work, on its device's lane: inputs written, graph run, outputs read.
  absl::Status RunCompute(const tensorgrid::v1::Compute& cmd, DecodedGraph& graph,
                          const std::vector<std::shared_ptr<SessionBuffer>>& inputs,
                          const std::vector<std::shared_ptr<SessionBuffer>>& outputs,
                          tensorgrid::v1::ComputeReply* reply);
  absl::Status Grant(uint64_t handle, tensorgrid::v1::GrantPeerReadReply* reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status OpenModelFile(const tensorgrid::v1::OpenModelFile& cmd,
                             tensorgrid::v1::OpenModelFileReply* reply);
  absl::StatusOr<Device*> DeviceAt(uint32_t index) const;
  // Runs on device's lane (or the calling thread before lanes start).
  absl::StatusOr<Stream*> StreamFor(uint32_t device);
  bool cancelled() const { return env_.cancelled(); }

  const Env env_;
  // lane_of_[d]: the lane of device index d (indices naming the same Device share one).
  const std::vector<int> lane_of_;

  absl::Mutex mu_;  // serializes Run, RunOne, Refuse and Close.
  absl::flat_hash_map<uint64_t, std::string> grants_ ABSL_GUARDED_BY(mu_);
  // What peers deliver for this session's grants is charged to (made with the first grant;
  // closed with the session, after its grants are revoked and their pieces dropped).
  std::shared_ptr<MailboxAccount> mailbox_ ABSL_GUARDED_BY(mu_);
  // The lane of the first buffer allocated; once a buffer is on another, lanes_ runs the work.
  int first_lane_ ABSL_GUARDED_BY(mu_) = -1;
  bool parallel_ ABSL_GUARDED_BY(mu_) = false;
  // streams_[d]: device d's stream, created on first use by whoever runs d's work then.
  std::vector<std::unique_ptr<Stream>> streams_;

  DeviceLanes lanes_;  // last: its threads stop before the state their work uses goes.
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_COMMAND_DISPATCH_H_
