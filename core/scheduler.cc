#include "core/scheduler.h"

#include <chrono>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/lost_endpoint.h"
#include "core/status_macros.h"

namespace tg {
namespace {

using Clock = std::chrono::steady_clock;

double MicrosSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// dst's buffer copies directly when it can; otherwise the bytes bounce through host memory.
// dst has src's layout (a split input's copy), so a strided view moves only its rows, in one
// 2D call each way (one message each to a remote device), not the gaps between them.
absl::Status HostCopy(const Tensor* src, Tensor* dst, std::vector<uint8_t>* staging) {
  absl::Status s = dst->buffer->CopyFrom(src, dst);
  if (!absl::IsUnimplemented(s)) return s;
  if (std::optional<StridedRange> rows = TensorRows(*src); rows && !rows->TensorContiguous()) {
    const size_t n = rows->n_rows * rows->row_size;
    if (staging->size() < n) staging->resize(n);
    TG_RETURN_IF_ERROR(src->buffer->GetTensor2D(src, staging->data(), *rows));
    return dst->buffer->SetTensor2D(dst, staging->data(), *rows);
  }
  const size_t n = src->NumBytes();
  if (staging->size() < n) staging->resize(n);
  TG_RETURN_IF_ERROR(src->buffer->GetTensor(src, staging->data(), 0, n));
  return dst->buffer->SetTensor(dst, staging->data(), 0, n);
}

absl::Status Annotate(const absl::Status& s, size_t split, const Device& device) {
  return KeepIdentity(s, absl::Status(s.code(), absl::StrCat("split ", split, " on ", device.name(),
                                                             ": ", s.message())));
}

}  // namespace

// --- ScheduledGraph ---------------------------------------------------------------------------

ScheduledGraph::~ScheduledGraph() {
  if (in_flight_) scheduler_->Wait(*this).IgnoreError();  // the workers still use our graph.
}

Device* ScheduledGraph::DeviceOf(const Tensor* t) const {
  const int d = assignment_.Get(t);
  return d < 0 ? nullptr : scheduler_->backends()[d].device;
}

int ScheduledGraph::n_split_inputs() const {
  int n = 0;
  for (const Split& s : plan_.splits) n += static_cast<int>(s.inputs.size());
  return n;
}

absl::Status ScheduledGraph::SetInput(Tensor* t, const void* data, size_t bytes) {
  if (t == nullptr || !t->HasFlag(kFlagInput) || assignment_.Get(t) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler: ", t == nullptr ? std::string("null") : DescribeTensor(*t),
                     " is not an input of this graph"));
  }
  if (t->buffer == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("scheduler: input ", DescribeTensor(*t), " has no memory"));
  }
  return t->buffer->SetTensor(t, data, 0, bytes);
}

// --- Scheduler: setup -------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(std::vector<SchedulerBackend> backends,
                                                             const SchedulerOptions& options) {
  if (backends.empty()) return absl::InvalidArgumentError("scheduler: no devices");
  if (options.n_copies < 1 || options.n_copies > kMaxSchedulerCopies) {
    return absl::InvalidArgumentError(absl::StrCat("scheduler: n_copies ", options.n_copies,
                                                   " is outside [1, ", kMaxSchedulerCopies, "]"));
  }
  std::unique_ptr<Scheduler> s(new Scheduler());
  for (const SchedulerBackend& b : backends) {
    if (b.device == nullptr || b.stream == nullptr) {
      return absl::InvalidArgumentError("scheduler: a device or stream is missing");
    }
    if (b.stream->device() != b.device) {
      return absl::InvalidArgumentError(absl::StrCat("scheduler: the stream given for ",
                                                     b.device->name(), " belongs to ",
                                                     b.stream->device()->name()));
    }
    for (Device* seen : s->devices_) {
      if (seen == b.device) {
        return absl::InvalidArgumentError(
            absl::StrCat("scheduler: ", b.device->name(), " is listed twice"));
      }
    }
    s->devices_.push_back(b.device);
    absl::StatusOr<std::unique_ptr<Event>> event = b.device->CreateEvent();
    s->events_.push_back(event.ok() ? std::move(*event) : nullptr);
  }
  s->backends_ = std::move(backends);
  s->pending_.assign(s->devices_.size(), false);
  s->n_copies_ = options.n_copies;
  s->allocators_.resize(options.n_copies);
  for (auto& slot : s->allocators_) {
    for (Device* d : s->devices_) {
      slot.push_back(std::make_unique<GraphAllocator>(d->default_buffer_type()));
    }
  }
  s->slot_busy_.assign(options.n_copies, false);
  return s;
}

Scheduler::~Scheduler() = default;

SchedulerStats Scheduler::stats() const {
  MutexLock lock(&stats_mu_);
  return stats_;
}

// --- Scheduler: planning ----------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<ScheduledGraph>> Scheduler::Schedule(Graph& graph, int slot) {
  if (slot < 0 || slot >= n_copies_) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler: slot ", slot, " is outside [0, ", n_copies_, ")"));
  }
  if (slot_busy_[slot]) {
    return absl::FailedPreconditionError(
        absl::StrCat("scheduler: a graph in slot ", slot, " is still in flight"));
  }
  std::unique_ptr<ScheduledGraph> g(new ScheduledGraph(this, &graph, slot));
  TG_ASSIGN_OR_RETURN(g->assignment_, AssignDevices(graph, devices_));
  TG_ASSIGN_OR_RETURN(g->plan_, CutSplits(graph, devices_, g->assignment_, g->ctx_));
  TG_RETURN_IF_ERROR(Allocate(*g));
  g->optimized_.assign(g->plan_.splits.size(), 0);
  for (const Split& split : g->plan_.splits) g->job_.split_worker.push_back(split.device);
  ScheduledGraph* raw = g.get();
  g->job_.run = [this, raw](int i) {
    return RunSplit(*raw, i, /*pipelined=*/true, &worker_staging_[raw->plan_.splits[i].device]);
  };
  return g;
}

// Per device, the sequence its allocator plans: its leafs, then in split order the copies its
// splits receive, the nodes whose memory it holds, and markers (tensors that only read) that
// keep memory alive while another device still needs it.
std::vector<Graph> Scheduler::DeviceAllocationGraphs(ScheduledGraph& g) {
  const DeviceAssignment& a = g.assignment_;
  std::vector<Graph> per_device(devices_.size());
  auto home = [&](const Tensor* t) { return a.Get(MemoryOwner(t)); };
  auto marker = [&](Tensor* const* srcs, int n) {
    Tensor* m = g.ctx_.NewBlank();
    std::copy(srcs, srcs + n, m->src);
    m->SetName("scheduler_keep_alive");
    return m;
  };
  for (Tensor* leaf : g.graph_->leafs) per_device[a.Get(leaf)].leafs.push_back(leaf);
  for (const Split& s : g.plan_.splits) {
    for (const SplitInput& in : s.inputs) {
      per_device[s.device].nodes.push_back(in.copy);
      // The source is read when the split starts.
      per_device[home(in.src)].nodes.push_back(marker(&in.src, 1));
    }
    for (size_t i = s.begin; i < s.end; ++i) {
      Tensor* node = g.graph_->nodes[i];
      const int h = home(node);
      per_device[h].nodes.push_back(node);
      // Computed on one device, stored on another (SET_ROWS into a cache elsewhere): its
      // inputs on the computing device live until it runs.
      if (a.Get(node) != h) per_device[a.Get(node)].nodes.push_back(marker(node->src, kMaxSrc));
    }
  }
  return per_device;
}

absl::Status Scheduler::Allocate(ScheduledGraph& g) {
  std::vector<Graph> per_device = DeviceAllocationGraphs(g);
  // Liveness must see the nodes reading the copies.
  g.plan_.ApplyRewires();
  absl::Status status;
  for (size_t d = 0; d < devices_.size() && status.ok(); ++d) {
    GraphAllocator& allocator = *allocators_[g.slot_][d];
    const int device = static_cast<int>(d);
    allocator.set_filter([&g, device](const Tensor& t) { return g.assignment_.Get(&t) == device; });
    status = allocator.Allocate(per_device[d]);
    allocator.set_filter(nullptr);
    if (!status.ok()) {
      status = KeepIdentity(
          status,
          absl::Status(status.code(), absl::StrCat("scheduler: compute memory on ",
                                                   devices_[d]->name(), ": ", status.message())));
    }
  }
  g.plan_.RestoreRewires();
  return status;
}

// --- Scheduler: running -----------------------------------------------------------------------

absl::Status Scheduler::Compute(ScheduledGraph& g) {
  if (g.scheduler_ != this) return absl::InvalidArgumentError("scheduler: foreign graph");
  if (g.in_flight_ || (pipeline_ != nullptr && pipeline_->in_flight() > 0)) {
    return absl::FailedPreconditionError("scheduler: Compute while graphs are in flight");
  }
  g.plan_.ApplyRewires();
  // A stream may hold the graph's commands and send them together (a remote device: its
  // compute and the pushes behind it in one message); whatever waits for them sends them.
  for (const SchedulerBackend& b : backends_) b.stream->BeginBatch();
  absl::Status status;
  for (size_t i = 0; i < g.plan_.splits.size() && status.ok(); ++i) {
    status = RunSplit(g, static_cast<int>(i), /*pipelined=*/false, &staging_);
  }
  for (const SchedulerBackend& b : backends_) status.Update(b.stream->EndBatch());
  absl::Status sync = SynchronizePending();
  g.plan_.RestoreRewires();
  {
    MutexLock lock(&stats_mu_);
    ++stats_.graphs;
  }
  return status.ok() ? sync : status;
}

absl::Status Scheduler::Submit(ScheduledGraph& g) {
  if (g.scheduler_ != this) return absl::InvalidArgumentError("scheduler: foreign graph");
  if (g.in_flight_) return absl::FailedPreconditionError("scheduler: graph already submitted");
  if (pipeline_ == nullptr) {
    worker_staging_.resize(devices_.size());
    pipeline_ = std::make_unique<SplitPipeline>(static_cast<int>(devices_.size()));
  }
  // The workers take the streams over: nothing of the calling thread may still be queued.
  TG_RETURN_IF_ERROR(SynchronizePending());
  g.plan_.ApplyRewires();
  g.in_flight_ = true;
  slot_busy_[g.slot_] = true;
  pipeline_->Submit(&g.job_);
  return absl::OkStatus();
}

absl::Status Scheduler::Wait(ScheduledGraph& g) {
  if (!g.in_flight_) return absl::OkStatus();
  absl::Status status = pipeline_->Wait(&g.job_);
  g.in_flight_ = false;
  slot_busy_[g.slot_] = false;
  g.plan_.RestoreRewires();
  MutexLock lock(&stats_mu_);
  ++stats_.graphs;
  return status;
}

absl::Status Scheduler::RunSplit(ScheduledGraph& g, int i, bool pipelined,
                                 std::vector<uint8_t>* staging) {
  const Clock::time_point start = Clock::now();
  Split& split = g.plan_.splits[i];
  const Device& device = *devices_[split.device];
  Stream* stream = backends_[split.device].stream;
  double copy_us = 0;
  int64_t copy_bytes = 0;
  if (!split.inputs.empty()) {
    for (const SplitInput& in : split.inputs)
      copy_bytes += static_cast<int64_t>(in.src->NumBytes());
    if (absl::Status s = CopyInputs(split, pipelined, staging); !s.ok()) {
      return Annotate(s, i, device);
    }
    copy_us = MicrosSince(start);
  }
  if (!g.optimized_[i]) {
    if (absl::Status s = stream->OptimizeGraph(split.graph); !s.ok()) return Annotate(s, i, device);
    g.optimized_[i] = 1;
  }
  const Clock::time_point compute_start = Clock::now();
  absl::Status s = stream->Compute(split.graph);
  // A worker hands the split over finished; the calling thread waits only when it must.
  if (s.ok() && pipelined) s = stream->Synchronize();
  const double compute_us = MicrosSince(compute_start);
  if (!s.ok()) return Annotate(s, i, device);
  if (!pipelined) {
    pending_[split.device] = true;
    Event* event = events_[split.device].get();
    if (event != nullptr && !stream->RecordEvent(event).ok()) events_[split.device].reset();
  }
  MutexLock lock(&stats_mu_);
  stats_.compute_us += compute_us;
  stats_.copy_us += copy_us;
  stats_.overhead_us += MicrosSince(start) - compute_us - copy_us;
  ++stats_.splits;
  stats_.copies += static_cast<int64_t>(split.inputs.size());
  stats_.copy_bytes += copy_bytes;
  return absl::OkStatus();
}

absl::Status Scheduler::CopyInputs(const Split& split, bool pipelined,
                                   std::vector<uint8_t>* staging) {
  Stream* stream = backends_[split.device].stream;
  std::vector<const SplitInput*> rest;
  for (const SplitInput& in : split.inputs) {
    // A push is ordered after its source's work and awaited by this stream: nobody waits.
    // In the pipeline every producer has finished already, and the pull costs nothing more.
    const int from = pipelined ? -1 : DeviceOf(*in.src);
    absl::Status s = from < 0 || from == split.device
                         ? absl::UnimplementedError("no push")
                         : backends_[from].stream->PushTensorAsync(in.src, stream, in.copy);
    if (s.ok()) continue;
    if (!absl::IsUnimplemented(s)) return s;
    rest.push_back(&in);
  }
  if (rest.empty()) return absl::OkStatus();
  // In the pipeline every producer finished (and synchronized) before this split started.
  if (!pipelined) TG_RETURN_IF_ERROR(SyncForCopies(split.device, /*host=*/false));
  bool async = false;
  for (const SplitInput* in : rest) {
    absl::Status s = stream->CopyTensorAsync(in->src, in->copy);
    if (s.ok()) {
      async = true;
      continue;
    }
    if (!absl::IsUnimplemented(s)) return s;
    if (!pipelined) TG_RETURN_IF_ERROR(SyncForCopies(split.device, /*host=*/true));
    TG_RETURN_IF_ERROR(HostCopy(in->src, in->copy, staging));
  }
  // The sources may be overwritten by their devices' next splits: let the copies finish.
  if (async && !pipelined) return stream->Synchronize();
  return absl::OkStatus();
}

int Scheduler::DeviceOf(const Tensor& t) const {
  if (t.buffer == nullptr) return -1;
  const Device* device = t.buffer->type()->device();
  for (size_t d = 0; d < devices_.size(); ++d) {
    if (devices_[d] == device) return static_cast<int>(d);
  }
  return -1;
}

// Sequential mode: before copying into `device`, the devices with queued work must have
// produced the sources. A device-side copy lets `device`'s stream wait on their events; a copy
// through the host (host = true) waits for every queued device, `device` included.
absl::Status Scheduler::SyncForCopies(int device, bool host) {
  for (size_t p = 0; p < devices_.size(); ++p) {
    if (!pending_[p] || (!host && static_cast<int>(p) == device)) continue;
    if (!host && events_[p] != nullptr &&
        backends_[device].stream->WaitEvent(events_[p].get()).ok()) {
      continue;
    }
    TG_RETURN_IF_ERROR(backends_[p].stream->Synchronize());
    pending_[p] = false;
  }
  return absl::OkStatus();
}

absl::Status Scheduler::SynchronizePending() {
  // Every device is waited for even after one failed, so that no error of this graph (a
  // device that saw its peer fail) is left behind to surface in a later call.
  absl::Status status;
  for (size_t p = 0; p < devices_.size(); ++p) {
    if (!pending_[p]) continue;
    status.Update(backends_[p].stream->Synchronize());
    pending_[p] = false;
  }
  return status;
}

}  // namespace tg
