#include "models/scheduled_executor.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/status_macros.h"

namespace tg {
namespace {

// Inputs are written synchronously through their buffers: no one stream runs the graph (the
// scheduler runs each split on its device's stream).
absl::Status WriteThroughBuffer(Tensor* t, const void* data, size_t bytes) {
  return t->buffer->SetTensor(t, data, 0, bytes);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ScheduledExecutor>> ScheduledExecutor::Create(
    absl::Span<Device* const> devices, int n_copies, int64_t min_micro_batch) {
  std::unique_ptr<ScheduledExecutor> e(new ScheduledExecutor());
  e->min_micro_batch_ = std::max<int64_t>(min_micro_batch, 1);
  std::vector<SchedulerBackend> backends;
  for (Device* d : devices) {
    TG_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream, d->CreateStream());
    backends.push_back({d, stream.get()});
    e->streams_.push_back(std::move(stream));
  }
  SchedulerOptions so;
  so.n_copies = n_copies;
  TG_ASSIGN_OR_RETURN(e->scheduler_, Scheduler::Create(std::move(backends), so));
  return e;
}

int64_t ScheduledExecutor::MicroBatches(int64_t n_tokens) const {
  return std::clamp<int64_t>(n_tokens / min_micro_batch_, 1, scheduler_->n_copies());
}

absl::Status ScheduledExecutor::Run(Batch& batch) {
  if (MicroBatches(batch.n_tokens()) > 1) return RunPipelined(batch);
  return RunSequential(batch);
}

void ScheduledExecutor::AddSchedulerTimes(const SchedulerStats& before) {
  DecodeTimings& timings = mutable_timings();
  const SchedulerStats after = scheduler_->stats();
  timings.compute_us += after.compute_us - before.compute_us;
  timings.transfer_us += after.copy_us - before.copy_us;
  timings.overhead_us += after.overhead_us - before.overhead_us;
  timings.splits += after.splits - before.splits;
  timings.graphs += after.graphs - before.graphs;
}

void ScheduledExecutor::DropLastGraph() {
  last_scheduled_.reset();  // before the graph it was made of.
  last_graph_.reset();
}

absl::Status ScheduledExecutor::RunSequential(Batch& batch) {
  const BatchPiece whole = WholeBatch(batch);
  const auto t0 = std::chrono::steady_clock::now();
  GraphKey key = batch.Key(whole);
  if (last_graph_ == nullptr || !(last_key_ == key)) {
    DropLastGraph();
    TG_ASSIGN_OR_RETURN(last_graph_, batch.Build(whole));
    absl::StatusOr<std::unique_ptr<ScheduledGraph>> scheduled =
        scheduler_->Schedule(last_graph_->graph);
    if (!scheduled.ok()) {
      DropLastGraph();
      return scheduled.status();
    }
    last_scheduled_ = std::move(*scheduled);
    last_key_ = std::move(key);
  }
  absl::Status status = batch.FillInputs(*last_graph_, whole, WriteThroughBuffer);
  mutable_timings().build_us += MicrosSince(t0);
  if (status.ok()) {
    const SchedulerStats before = scheduler_->stats();
    status = scheduler_->Compute(*last_scheduled_);
    AddSchedulerTimes(before);
  }
  if (status.ok()) status = batch.ReadResults(*last_graph_, whole);
  if (!status.ok()) DropLastGraph();  // a failed run leaves nothing to trust.
  return status;
}

// Each micro-batch in its own memory slot, all in flight together. The devices run each
// micro-batch's splits in order, and a layer's micro-batches in order (one thread per
// device), so each micro-batch sees the KV cells of the ones before it. The pipeline drains
// at the end of the batch.
absl::Status ScheduledExecutor::RunPipelined(Batch& batch) {
  struct InFlight {
    BatchPiece piece;
    std::unique_ptr<LlamaGraph> graph;
    std::unique_ptr<ScheduledGraph> scheduled;  // declared after graph: destroyed first.
  };
  DropLastGraph();  // slot 0's memory is planned anew.
  const int64_t n = batch.n_tokens();
  const int64_t n_micro = MicroBatches(n);
  std::vector<InFlight> slots(n_micro);
  auto finish = [&](InFlight& f) {
    absl::Status s = f.scheduled == nullptr ? absl::OkStatus() : scheduler_->Wait(*f.scheduled);
    if (s.ok() && f.scheduled != nullptr) s = batch.ReadResults(*f.graph, f.piece);
    f.scheduled.reset();
    f.graph.reset();
    return s;
  };
  auto submit = [&](InFlight& f, int slot) -> absl::Status {
    const auto t0 = std::chrono::steady_clock::now();
    TG_ASSIGN_OR_RETURN(f.graph, batch.Build(f.piece));
    TG_ASSIGN_OR_RETURN(f.scheduled, scheduler_->Schedule(f.graph->graph, slot));
    TG_RETURN_IF_ERROR(batch.FillInputs(*f.graph, f.piece, WriteThroughBuffer));
    mutable_timings().build_us += MicrosSince(t0);
    return scheduler_->Submit(*f.scheduled);
  };
  const SchedulerStats before = scheduler_->stats();
  absl::Status status;
  int64_t offset = 0;
  for (int64_t m = 0; m < n_micro && status.ok(); ++m) {
    slots[m].piece = {offset, n / n_micro + (m < n % n_micro ? 1 : 0)};
    status = submit(slots[m], static_cast<int>(m));
    offset += slots[m].piece.size;
  }
  // Every micro-batch in flight is waited for, even after an error: the device threads still
  // read their graphs.
  for (InFlight& f : slots) {
    absl::Status s = finish(f);
    if (status.ok()) status = s;
  }
  AddSchedulerTimes(before);
  return status;
}

}  // namespace tg
