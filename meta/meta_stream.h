// MetaStream: computes graphs on a meta device. Per graph structure it builds (and caches) a
// partition plan (graph_partition.h), replayed for later graphs of that structure, or run
// as it is for the very graph it was last derived from, unchanged (GraphSnapshot). Each
// Compute then gives the plan's tensors memory in the stream's per-device compute memory
// (plan_memory.h), scatters the inputs written since, and runs the plan with one host
// thread per device: every device's subgraph of a step on its own stream, then the step's
// collectives (all-reduce, all-gather) among the threads. When the all-reduces only queue
// (RPC devices summed by their servers), all-gathers run as all-reduces of zero-padded
// slices and each device's work goes out in batches (Stream::BeginBatch: one message to a
// remote device), cut only before collectives that wait for the devices; where none waits,
// one thread queues every device's work (no per-device threads). Outputs are registered
// with their buffers so that Buffer::GetTensor gathers them. Compute returns when every
// device is done, except where one thread queues every device's work: then it returns once
// the work is queued (remote devices run their commands in order, the next Compute's inputs
// and mirrored outputs read by GetTensorAsync included), and Synchronize, or an event
// recorded after it (MetaDevice::CreateEvent), waits for it; so decode steps are queued
// ahead of their picks, several to a message between BeginBatch and EndBatch. Used by one
// thread at a time (as every Stream).
#ifndef TENSORGRID_META_META_STREAM_H_
#define TENSORGRID_META_META_STREAM_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/spin_barrier.h"
#include "core/thread_pool.h"
#include "meta/allreduce.h"
#include "meta/graph_partition.h"
#include "meta/graph_snapshot.h"
#include "meta/plan_memory.h"

namespace tg::meta {

class MetaDevice;

class MetaStream : public Stream {
 public:
  static absl::StatusOr<std::unique_ptr<MetaStream>> Create(MetaDevice* device);

  Device* device() const override;
  absl::Status Synchronize() override;  // every device's stream.
  absl::Status Compute(Graph& graph) override;
  // A mirrored output of the last Compute is read from one device's stream, in order behind
  // its work; anything else as the buffer reads it (at once).
  absl::Status GetTensorAsync(const Tensor* t, void* data, size_t offset, size_t size) override;
  // `event` (a MetaEvent of this device) on every device's stream.
  absl::Status RecordEvent(Event* event) override;
  // Holds every device's work until the matching EndBatch (nested: the outermost counts),
  // so that steps queued ahead go to a remote device in one message.
  void BeginBatch() override;
  absl::Status EndBatch() override;
  // compute_us and transfer_us: the host threads' time between collectives, or where the
  // devices only queue (rpc-servers summing among themselves) the slowest device's own
  // compute time and the rest of the wall time (collectives, latency) from the first plan
  // queued to the Synchronize after it.
  StreamStats stats() const override { return stats_; }

  // The plan the last Compute ran, and how many plans were built, replayed, and run again
  // as they were for an unchanged graph so far (for tests and tools).
  const PartitionPlan* last_plan() const { return last_plan_.get(); }
  int64_t partitions() const { return partitions_; }
  int64_t replays() const { return replays_; }
  int64_t reruns() const { return reruns_; }
  // Bytes of compute memory the stream holds on device d (for tools and tests).
  size_t compute_bytes(int d) const { return memory_->bytes(d); }
  // What device d's own stream reports (for tools and tests).
  StreamStats device_stats(int d) const { return streams_[d]->stats(); }

 private:
  explicit MetaStream(MetaDevice* device);
  absl::StatusOr<std::shared_ptr<PartitionPlan>> PlanFor(Graph& graph);
  absl::Status Upload(PartitionPlan& plan, Graph& graph);
  absl::Status Execute(PartitionPlan& plan);
  void RunRank(int rank, PartitionPlan& plan, bool batch);
  absl::Status RunComm(int rank, CommOp& op, bool wait_for_peers);
  // Sends every device's work held by BeginBatch (the batches stay open).
  absl::Status SendHeld();
  // Notes the time and the devices' compute times, unless plans are already being timed
  // (queued_since_ set); Synchronize counts what ran since.
  void StartTiming();
  // Where no collective of the plan waits for the devices (all queue: rpc-servers summing
  // among themselves), this thread queues every device's work in plan order, each device's
  // in one batch (or the caller's), and returns: no rank threads, no barriers, no wait.
  bool AllQueue(const PartitionPlan& plan) const;
  void QueueAll(PartitionPlan& plan);
  absl::Status QueueComm(CommOp& op);
  // True when `op` waits for the devices on the host: every collective unless the
  // all-reduces only queue (AllReducer::QueuesOnly), then the all-gathers that cannot run as
  // a sum (GathersBySum).
  bool Waits(const CommOp& op) const;
  void Register(const std::shared_ptr<PartitionPlan>& plan, Graph& graph);

  // Plans kept for reuse: a prompt graph and a decode graph, with room to spare.
  static constexpr size_t kPlanCacheSize = 4;
  // Inputs larger than this are written after the held work is sent (Upload).
  static constexpr size_t kHeldInputBytes = size_t{64} << 10;

  MetaDevice* device_;
  std::vector<std::unique_ptr<Stream>> streams_;  // one per device.
  std::unique_ptr<AllReducer> reducer_;
  // Shared with the outputs registered for GetTensor, which may outlive the stream.
  std::shared_ptr<PlanMemory> memory_;
  ThreadPool pool_;
  Barrier barrier_;
  struct Cached {
    std::shared_ptr<PartitionPlan> plan;
    GraphSnapshot graph;  // what the plan was last derived from.
  };
  std::deque<Cached> cache_;  // most recently used first.
  std::shared_ptr<PartitionPlan> last_plan_;
  int64_t partitions_ = 0;
  int64_t replays_ = 0;
  int64_t reruns_ = 0;
  std::atomic<bool> failed_{false};
  int batch_depth_ = 0;  // BeginBatch calls not yet ended.
  // Since when plans were queued without waiting (the first such, since the last
  // Synchronize), and the devices' compute times then.
  std::optional<std::chrono::steady_clock::time_point> queued_since_;
  std::vector<double> compute_before_;
  std::vector<absl::Status> rank_status_;
  StreamStats stats_;
};

}  // namespace tg::meta

#endif  // TENSORGRID_META_META_STREAM_H_
