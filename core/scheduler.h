// Scheduler: runs one graph over several devices (ggml_backend_sched, written for tensorgrid).
// Given devices in priority order, each with a stream, Schedule() assigns every node to a
// device (core/scheduler_assign.h: where its weight is, or a higher-priority device that asks
// for it through Device::OffloadOp when the weight is in host memory), cuts the node sequence into
// splits of consecutive nodes on one device with copies of their cross-device inputs
// (core/scheduler_split.h), and places every tensor in its device's compute memory (one
// GraphAllocator per device). Compute() then runs the splits in order: copy the split's inputs
// (pushed by the source device's stream when it can, Stream::PushTensorAsync, which no one
// waits for; else Stream::CopyTensorAsync, else Buffer::CopyFrom, else through host memory,
// after waiting for the producing devices with events when they have them, else by
// synchronizing), optional Stream::OptimizeGraph, and Stream::Compute.
//
// Pipeline parallelism (n_copies > 1): each of n_copies memory "slots" has its own compute
// memory on every device. Graphs scheduled in different slots may be in flight together
// through Submit()/Wait(): one host thread per device (core/scheduler_pipeline.h) runs the
// splits, so device d computes graph m+1 while device d+1 computes graph m. The caller cuts
// its work into such graphs (LlamaSession: micro-batches of a prompt).
//
// Graph inputs (kFlagInput leafs) get memory on the device that reads them first; write them
// after Schedule() with ScheduledGraph::SetInput (or through t->buffer). Devices that cannot
// use that memory read a copy made when their split runs.
//
// Thread-safety: Schedule, Compute, Submit and Wait are called from one thread at a time (the
// owner); stats() from any thread. The streams are the scheduler's to use while it runs.
#ifndef TENSORGRID_CORE_SCHEDULER_H_
#define TENSORGRID_CORE_SCHEDULER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/backend.h"
#include "core/context.h"
#include "core/graph.h"
#include "core/graph_allocator.h"
#include "core/mutex.h"
#include "core/scheduler_assign.h"
#include "core/scheduler_pipeline.h"
#include "core/scheduler_split.h"

namespace tg {

struct SchedulerBackend {
  Device* device = nullptr;
  Stream* stream = nullptr;  // a stream of `device`, owned by the caller.
};

// Most graphs in flight at once (ggml's GGML_SCHED_MAX_COPIES is 4).
inline constexpr int kMaxSchedulerCopies = 8;

struct SchedulerOptions {
  int n_copies = 1;  // memory slots for pipelining (1: no pipelining).
};

// Where the time of scheduled graphs went (sums since the scheduler was created).
struct SchedulerStats {
  double compute_us = 0;   // in Stream::Compute, summed over devices.
  double copy_us = 0;      // copying split inputs between devices.
  double overhead_us = 0;  // the rest of running splits: syncs, hooks, bookkeeping.
  int64_t splits = 0;      // split runs.
  int64_t copies = 0;      // split inputs copied.
  int64_t copy_bytes = 0;
  int64_t graphs = 0;
};

class Scheduler;

// A graph placed on the scheduler's devices. Must not outlive the graph or the scheduler;
// destroying it waits for it if it is in flight.
class ScheduledGraph {
 public:
  ~ScheduledGraph();
  ScheduledGraph(const ScheduledGraph&) = delete;
  ScheduledGraph& operator=(const ScheduledGraph&) = delete;

  // The device computing (a node) or holding (a leaf) t; nullptr when t is not in the graph.
  Device* DeviceOf(const Tensor* t) const;
  const std::vector<Split>& splits() const { return plan_.splits; }
  int n_split_inputs() const;  // copies made per run.
  int slot() const { return slot_; }
  // Writes `bytes` of a graph input from host memory.
  absl::Status SetInput(Tensor* t, const void* data, size_t bytes);

 private:
  friend class Scheduler;
  ScheduledGraph(Scheduler* scheduler, Graph* graph, int slot)
      : scheduler_(scheduler), graph_(graph), slot_(slot) {}

  Scheduler* scheduler_;
  Graph* graph_;
  int slot_;
  Context ctx_;  // copies and liveness markers.
  DeviceAssignment assignment_;
  SplitPlan plan_;
  std::vector<uint8_t> optimized_;  // OptimizeGraph ran on split i (bytes: workers write them).
  PipelineJob job_;
  bool in_flight_ = false;
};

class Scheduler {
 public:
  // `backends` in priority order (first = preferred). INVALID_ARGUMENT for no backends, a
  // missing device or stream, a stream of another device, a device listed twice, or
  // n_copies outside [1, kMaxSchedulerCopies].
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(std::vector<SchedulerBackend> backends,
                                                           const SchedulerOptions& options = {});
  ~Scheduler();

  // Assigns, splits and allocates `graph` in memory slot `slot` (no graph of that slot may be
  // in flight). The graph must stay alive and unchanged while the result exists. Schedule a
  // graph once: its tensors keep the memory they got (the allocator leaves placed tensors).
  absl::StatusOr<std::unique_ptr<ScheduledGraph>> Schedule(Graph& graph, int slot = 0);
  // Runs every split in order on the calling thread and waits for all devices.
  absl::Status Compute(ScheduledGraph& g);
  // Pipelined: queues g's splits on the per-device threads and returns at once.
  absl::Status Submit(ScheduledGraph& g);
  // Waits for a submitted graph; returns its first error.
  absl::Status Wait(ScheduledGraph& g);

  int n_copies() const { return n_copies_; }
  absl::Span<const SchedulerBackend> backends() const { return backends_; }
  SchedulerStats stats() const;

 private:
  Scheduler() = default;
  absl::Status Allocate(ScheduledGraph& g);
  std::vector<Graph> DeviceAllocationGraphs(ScheduledGraph& g);
  absl::Status RunSplit(ScheduledGraph& g, int i, bool pipelined, std::vector<uint8_t>* staging);
  absl::Status CopyInputs(const Split& split, bool pipelined, std::vector<uint8_t>* staging);
  absl::Status SyncForCopies(int device, bool host);
  // The index of the device whose memory holds t; -1 when none of ours.
  int DeviceOf(const Tensor& t) const;
  absl::Status SynchronizePending();

  std::vector<SchedulerBackend> backends_;
  std::vector<Device*> devices_;
  std::vector<std::unique_ptr<Event>> events_;  // per device; nullptr without events.
  std::vector<bool> pending_;  // sequential mode: a device has work not yet waited for.
  int n_copies_ = 1;
  // allocators_[slot][device].
  std::vector<std::vector<std::unique_ptr<GraphAllocator>>> allocators_;
  std::vector<bool> slot_busy_;
  std::vector<uint8_t> staging_;                      // host bounce buffer of the calling thread.
  std::vector<std::vector<uint8_t>> worker_staging_;  // one per pipeline worker.
  std::unique_ptr<SplitPipeline> pipeline_;

  mutable Mutex stats_mu_;  // pipeline workers add to stats_.
  SchedulerStats stats_ ABSL_GUARDED_BY(stats_mu_);
};

}  // namespace tg

#endif  // TENSORGRID_CORE_SCHEDULER_H_
