#include "models/single_device_executor.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/lost_endpoint.h"
#include "core/status_macros.h"

namespace tg {

absl::StatusOr<std::unique_ptr<SingleDeviceExecutor>> SingleDeviceExecutor::Create(
    Device* device, int greedy_batch) {
  TG_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream, device->CreateStream());
  std::unique_ptr<SingleDeviceExecutor> e(new SingleDeviceExecutor(
      device, std::move(stream), std::make_unique<GraphAllocator>(device->default_buffer_type()),
      greedy_batch));
  // Greedy steps are queued ahead where events tell when each pick has arrived.
  std::vector<GreedyStep> ring(
      2 * static_cast<size_t>(greedy_batch == 0 ? kMaxGreedyBatch : greedy_batch));
  for (GreedyStep& step : ring) {
    absl::StatusOr<std::unique_ptr<Event>> event = device->CreateEvent();
    if (absl::IsUnimplemented(event.status())) return e;
    if (!event.ok()) {
      return KeepIdentity(
          event.status(),
          absl::Status(event.status().code(),
                       absl::StrCat("creating an event on ", device->name(),
                                    " for greedy steps queued ahead: ", event.status().message())));
    }
    step.event = *std::move(event);
  }
  e->ring_ = std::move(ring);
  return e;
}

SingleDeviceExecutor::SingleDeviceExecutor(Device* device, std::unique_ptr<Stream> stream,
                                           std::unique_ptr<GraphAllocator> allocator,
                                           int greedy_batch)
    : device_(device),
      stream_(std::move(stream)),
      allocator_(std::move(allocator)),
      greedy_batch_(greedy_batch) {}

absl::Status SingleDeviceExecutor::CheckSupported(const Graph& graph) const {
  for (const Tensor* node : graph.nodes) {
    if (IsViewOp(node->op) || device_->SupportsOp(*node)) continue;
    return absl::UnimplementedError(absl::StrCat(
        device_->name(), " has no kernel for ", OpName(node->op), " ", DescribeTensor(*node),
        ": run the model in a layer split with a CPU beside it (e.g. --device ", device_->name(),
        ",CPU0 -sm layer -ts 9,1), where the scheduler gives such nodes "
        "to the CPU"));
  }
  return absl::OkStatus();
}

bool SingleDeviceExecutor::LastGraphFits(const GraphKey& key) const {
  return last_graph_ != nullptr && last_key_ == key;
}

absl::StatusOr<LlamaGraph*> SingleDeviceExecutor::GraphFor(Batch& batch, BatchPiece piece) {
  const GraphKey key = batch.Key(piece);
  if (LastGraphFits(key)) return last_graph_.get();
  last_graph_.reset();
  TG_ASSIGN_OR_RETURN(last_graph_, batch.Build(piece));
  last_key_ = key;
  if (absl::Status s = CheckSupported(last_graph_->graph); !s.ok()) {
    last_graph_.reset();
    return s;
  }
  // The device may reorder the nodes (Vulkan: independent ones between the same barriers),
  // which only helps before memory is shared out in node order.
  if (absl::Status s = stream_->OptimizeGraph(last_graph_->graph); !s.ok()) {
    last_graph_.reset();
    return s;
  }
  if (absl::Status s = allocator_->Allocate(last_graph_->graph); !s.ok()) {
    last_graph_.reset();
    return s;
  }
  return last_graph_.get();
}

absl::StatusOr<LlamaGraph*> SingleDeviceExecutor::Prepare(Batch& batch) {
  const auto t0 = std::chrono::steady_clock::now();
  const BatchPiece whole = WholeBatch(batch);
  TG_ASSIGN_OR_RETURN(LlamaGraph * g, GraphFor(batch, whole));
  auto write = [this](Tensor* t, const void* data, size_t bytes) {
    return stream_->SetTensorAsync(t, data, 0, bytes);
  };
  TG_RETURN_IF_ERROR(batch.FillInputs(*g, whole, write));
  mutable_timings().build_us += MicrosSince(t0);
  return g;
}

absl::Status SingleDeviceExecutor::Run(Batch& batch) {
  TG_ASSIGN_OR_RETURN(LlamaGraph * g, Prepare(batch));
  DecodeTimings& timings = mutable_timings();
  const StreamStats before = stream_->stats();
  const auto t1 = std::chrono::steady_clock::now();
  TG_RETURN_IF_ERROR(stream_->Compute(g->graph));
  TG_RETURN_IF_ERROR(stream_->Synchronize());
  // A meta device (--split-mode tensor) reports its all-reduce time and per-device pieces:
  // compute is the rest of the step, so that the two shares add up to at most the whole.
  const StreamStats after = stream_->stats();
  const double transfer_us = after.transfer_us - before.transfer_us;
  timings.compute_us += std::max(0.0, MicrosSince(t1) - transfer_us);
  timings.transfer_us += transfer_us;
  timings.splits += std::max<int64_t>(1, after.splits - before.splits);
  ++timings.graphs;
  return batch.ReadResults(*g, WholeBatch(batch));
}

absl::Status SingleDeviceExecutor::Generate(PickSteps& steps, int32_t token, int64_t max_tokens,
                                            absl::FunctionRef<bool(int32_t)> on_token) {
  if (!queues_greedy_ahead()) return Executor::Generate(steps, token, max_tokens, on_token);
  if (max_tokens <= 0) return absl::OkStatus();
  TG_RETURN_IF_ERROR(steps.Check(&token, 0));
  const int64_t ring = static_cast<int64_t>(ring_.size());
  GreedyRun run{.max_tokens = max_tokens,
                .batch = greedy_batch_ == 0 ? 1 : greedy_batch_,
                .host_token = &token,
                .start = std::chrono::steady_clock::now()};
  absl::Status status;
  while (status.ok()) {
    // The next batch goes out once at most one is in flight, before waiting: two batches
    // in flight keep the device busy while a pick crosses the link.
    while (run.queued < max_tokens && run.queued - run.done <= run.batch) {
      const int64_t queued = run.queued;
      status = QueueGreedyBatch(steps, run);
      if (!status.ok() || run.queued == queued) break;  // the next step needs a new graph.
    }
    if (!status.ok()) break;
    if (run.queued == run.done) {
      // Nothing in flight and nothing queued: the next step starts a new graph (a new KV
      // block) or the context is full. Its token comes from the host.
      run.host_token = &ring_[(run.done - 1) % ring].pick;
      status = steps.Check(run.host_token, 0);
      continue;
    }
    GreedyStep& step = ring_[run.done % ring];
    status = WaitGreedyStep(step);
    if (!status.ok()) break;
    steps.Advance();
    ++run.done;
    if (greedy_batch_ == 0) {
      const double step_us = MicrosSince(run.start) / static_cast<double>(run.done);
      run.batch = std::clamp<int64_t>(std::llround(kGreedyBatchUs / step_us), 1, kMaxGreedyBatch);
    }
    if (!on_token(step.pick) || run.done == max_tokens) break;  // steps ahead are discarded.
  }
  // Whatever happened, nothing stays in flight (discarded steps, or the work before an
  // error) once this returns.
  absl::Status drained = stream_->Synchronize();
  return status.ok() ? drained : status;
}

absl::Status SingleDeviceExecutor::QueueGreedyBatch(PickSteps& steps, GreedyRun& run) {
  const int64_t ring = static_cast<int64_t>(ring_.size());
  absl::Status status;
  stream_->BeginBatch();
  for (int64_t k = 0; k < run.batch && run.queued < run.max_tokens && status.ok(); ++k) {
    const int64_t ahead = run.queued - run.done;
    // A step takes its token from the step before it (the pick its graph copied into its
    // token input) while it runs in the same graph and the context has room.
    if (run.host_token == nullptr && (!steps.Check(nullptr, ahead).ok() ||
                                      !LastGraphFits(steps.Step(nullptr, ahead).Key({0, 1})))) {
      break;
    }
    status = QueueGreedyStep(steps.Step(run.host_token, ahead), ring_[run.queued % ring]);
    run.host_token = nullptr;
    ++run.queued;
  }
  const absl::Status sent = stream_->EndBatch();
  return status.ok() ? sent : status;
}

absl::Status SingleDeviceExecutor::QueueGreedyStep(Batch& step, GreedyStep& slot) {
  TG_ASSIGN_OR_RETURN(LlamaGraph * g, Prepare(step));
  DecodeTimings& timings = mutable_timings();
  const auto t1 = std::chrono::steady_clock::now();
  TG_RETURN_IF_ERROR(stream_->Compute(g->graph));
  TG_RETURN_IF_ERROR(stream_->GetTensorAsync(g->pick, &slot.pick, 0, sizeof(int32_t)));
  TG_RETURN_IF_ERROR(stream_->RecordEvent(slot.event.get()));
  timings.compute_us += MicrosSince(t1);
  ++timings.graphs;
  ++timings.splits;
  return absl::OkStatus();
}

absl::Status SingleDeviceExecutor::WaitGreedyStep(GreedyStep& slot) {
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s = slot.event->Synchronize();
  mutable_timings().compute_us += MicrosSince(t0);
  return s;
}

}  // namespace tg
