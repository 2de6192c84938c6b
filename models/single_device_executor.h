// SingleDeviceExecutor: runs a session's graphs on one device (which may itself be a meta
// device of a tensor split, or a remote one) through one stream and one compute allocator.
// The last graph stays allocated for the next batch of the same GraphKey (the decode steps
// of one kv_pad block), so such a batch builds and allocates nothing. Generation on a device
// with events queues steps ahead of their picks: each step's token is copied on the device
// from the previous step's pick (ARGMAX or SAMPLE), steps go out in batches (Stream::BeginBatch:
// one message each way on a remote device) with up to two batches in flight, so the device
// never waits for the host's round trip. Without events, one step at a time.
// A graph with a node the device has no kernel for is refused (UNIMPLEMENTED naming the node)
// rather than handed to the device: FallbackExecutor then runs it with the CPU.
// Not thread-safe: used by one session's thread.
#ifndef TENSORGRID_MODELS_SINGLE_DEVICE_EXECUTOR_H_
#define TENSORGRID_MODELS_SINGLE_DEVICE_EXECUTOR_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/graph_allocator.h"
#include "models/executor.h"
#include "models/llama_graph.h"

namespace tg {

class SingleDeviceExecutor : public Executor {
 public:
  // greedy_batch: steps submitted together (SessionOptions::greedy_batch; 0: as many as
  // take about kGreedyBatchUs). The greedy ring's events come from device->CreateEvent():
  // UNIMPLEMENTED means no queueing ahead; any other error is returned.
  static absl::StatusOr<std::unique_ptr<SingleDeviceExecutor>> Create(Device* device,
                                                                      int greedy_batch);

  absl::Status Run(Batch& batch) override;
  absl::Status Generate(PickSteps& steps, int32_t token, int64_t max_tokens,
                        absl::FunctionRef<bool(int32_t)> on_token) override;
  // True when generation steps are queued ahead (the device has events).
  bool queues_greedy_ahead() const { return !ring_.empty(); }

 private:
  // One greedy step in flight: its pick lands in `pick` when `event` has happened.
  struct GreedyStep {
    int32_t pick = -1;
    std::unique_ptr<Event> event;
  };
  // Where a Generate call is: steps queued and picks handed over (step i runs
  // i - done positions ahead of the model), and the next step's token when it comes from
  // the host (nullptr: from the step before it, on the device).
  struct GreedyRun {
    int64_t max_tokens = 0;
    int64_t batch = 1;
    int64_t queued = 0;
    int64_t done = 0;
    const int32_t* host_token = nullptr;
    std::chrono::steady_clock::time_point start;
  };

  SingleDeviceExecutor(Device* device, std::unique_ptr<Stream> stream,
                       std::unique_ptr<GraphAllocator> allocator, int greedy_batch);
  // The graph for `piece`: the last one when its key matches, else a new one, allocated.
  absl::StatusOr<LlamaGraph*> GraphFor(Batch& batch, BatchPiece piece);
  bool LastGraphFits(const GraphKey& key) const;
  // UNIMPLEMENTED naming the first node device_ cannot compute.
  absl::Status CheckSupported(const Graph& graph) const;
  // The graph of the whole batch with its inputs queued on the stream (build time counted).
  absl::StatusOr<LlamaGraph*> Prepare(Batch& batch);
  // Queues up to run.batch steps as one Stream batch.
  absl::Status QueueGreedyBatch(PickSteps& steps, GreedyRun& run);
  absl::Status QueueGreedyStep(Batch& step, GreedyStep& slot);
  absl::Status WaitGreedyStep(GreedyStep& slot);

  Device* device_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<GraphAllocator> allocator_;
  std::unique_ptr<LlamaGraph> last_graph_;  // allocated; nullptr after a failed build.
  GraphKey last_key_;
  int greedy_batch_ = 0;
  // The greedy steps in flight, twice the largest batch; empty without events.
  std::vector<GreedyStep> ring_;
};

}  // namespace tg

#endif  // TENSORGRID_MODELS_SINGLE_DEVICE_EXECUTOR_H_
