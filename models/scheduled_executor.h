// ScheduledExecutor: runs a session's graphs over the devices of a layer split through the
// scheduler (core/scheduler.h), with a stream per device. A batch of one token runs its
// splits one after another; a longer batch is pipelined: cut into up to n_copies
// micro-batches of nearly equal size, none under min_micro_batch tokens (a decode step of a
// few sequences runs whole), each in its own memory slot and all in flight
// together, so that device d computes micro-batch m+1 while device d+1 computes m. A batch
// run whole whose key equals the last one's (the decode steps of one kv_pad block) runs
// that graph again, placed and allocated as it was; every other batch builds its graphs
// anew. Greedy generation runs one step at a time (Executor's default).
// Not thread-safe: used by one session's thread (the scheduler's device threads are its own).
#ifndef TENSORGRID_MODELS_SCHEDULED_EXECUTOR_H_
#define TENSORGRID_MODELS_SCHEDULED_EXECUTOR_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/backend.h"
#include "core/scheduler.h"
#include "models/executor.h"

namespace tg {

class ScheduledExecutor : public Executor {
 public:
  // `devices` in priority order (the model's layer order), each given a stream; n_copies
  // memory slots (1: no pipelining), at most kMaxSchedulerCopies; micro-batches of at least
  // min_micro_batch tokens.
  static absl::StatusOr<std::unique_ptr<ScheduledExecutor>> Create(
      absl::Span<Device* const> devices, int n_copies,
      int64_t min_micro_batch = kMinMicroBatchTokens);

  absl::Status Run(Batch& batch) override;

 private:
  ScheduledExecutor() = default;
  // Micro-batches a batch of n_tokens is cut into (1: it runs whole).
  int64_t MicroBatches(int64_t n_tokens) const;
  void DropLastGraph();
  absl::Status RunSequential(Batch& batch);
  absl::Status RunPipelined(Batch& batch);
  void AddSchedulerTimes(const SchedulerStats& before);

  std::vector<std::unique_ptr<Stream>> streams_;  // one per device, used by the scheduler.
  std::unique_ptr<Scheduler> scheduler_;          // declared after streams_: destroyed first.
  int64_t min_micro_batch_ = 1;
  // The last batch run whole, kept for the next one of the same key (in slot 0).
  GraphKey last_key_;
  std::unique_ptr<LlamaGraph> last_graph_;
  std::unique_ptr<ScheduledGraph> last_scheduled_;  // declared after last_graph_: destroyed first.
};

}  // namespace tg

#endif  // TENSORGRID_MODELS_SCHEDULED_EXECUTOR_H_
