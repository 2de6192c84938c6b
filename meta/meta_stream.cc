#include "meta/meta_stream.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "meta/all_gather.h"
#include "meta/meta_buffer.h"
#include "meta/meta_device.h"
#include "meta/meta_event.h"
#include "meta/shadow_io.h"

namespace tg::meta {
namespace {

double MicrosSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
      .count();
}

// Zeroes rank's all-reduce target where that device contributes nothing (CommOp::zero_fill).
absl::Status ZeroFill(const CommOp& op, int rank) {
  if (static_cast<size_t>(rank) >= op.zero_fill.size() || !op.zero_fill[rank]) {
    return absl::OkStatus();
  }
  Tensor* t = op.dst[rank];
  return t->buffer->MemsetTensor(t, 0, 0, t->NumBytes());
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetaStream>> MetaStream::Create(MetaDevice* device) {
  std::unique_ptr<MetaStream> s(new MetaStream(device));
  for (Device* d : device->devices()) {
    TG_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream, d->CreateStream());
    s->streams_.push_back(std::move(stream));
  }
  TG_ASSIGN_OR_RETURN(s->reducer_,
                      AllReducer::Create(device->devices(), device->options().allreduce));
  std::vector<BufferType*> memory;
  for (int d = 0; d < device->n_devices(); ++d) memory.push_back(device->DeviceBufferType(d));
  s->memory_ = std::make_shared<PlanMemory>(std::move(memory));
  if (s->reducer_->QueuesOnly()) device->set_queues_work();
  return s;
}

MetaStream::MetaStream(MetaDevice* device)
    : device_(device),
      pool_(device->n_devices()),
      barrier_(device->n_devices()),
      rank_status_(device->n_devices()) {}

Device* MetaStream::device() const { return device_; }

absl::Status MetaStream::Synchronize() {
  absl::Status status;
  for (const std::unique_ptr<Stream>& s : streams_) status.Update(s->Synchronize());
  if (queued_since_.has_value()) {
    // The plans queued since then have run: split their time into the devices' compute
    // (the slowest device's, as their streams report it) and the rest.
    const double wall = MicrosSince(*queued_since_);
    double device_us = 0;
    for (size_t r = 0; r < streams_.size(); ++r) {
      device_us = std::max(device_us, streams_[r]->stats().compute_us - compute_before_[r]);
    }
    device_us = std::min(device_us, wall);
    stats_.compute_us += device_us;
    stats_.transfer_us += wall - device_us;
    queued_since_.reset();
  }
  return status;
}

void MetaStream::StartTiming() {
  if (queued_since_.has_value()) return;
  queued_since_ = std::chrono::steady_clock::now();
  compute_before_.clear();
  for (const auto& s : streams_) compute_before_.push_back(s->stats().compute_us);
}

absl::Status MetaStream::GetTensorAsync(const Tensor* t, void* data, size_t offset, size_t size) {
  MetaBuffer* mb = device_->AsOwnBuffer(t->buffer);
  std::optional<ShadowSet> set;
  if (mb != nullptr && mb->holds_graph_tensors() && t->view_src == nullptr) set = mb->Shadows(t);
  if (set.has_value() && set->state.is_mirrored()) {
    for (size_t d = 0; d < set->shadows.size(); ++d) {
      Tensor* shadow = set->shadows[d];
      if (shadow == nullptr || !shadow->IsContiguous()) continue;
      return streams_[d]->GetTensorAsync(shadow, data, offset, size);
    }
  }
  // Read at once, after the work it may wait for has gone out.
  TG_RETURN_IF_ERROR(SendHeld());
  return Stream::GetTensorAsync(t, data, offset, size);
}

void MetaStream::BeginBatch() {
  if (batch_depth_++ > 0) return;
  for (const std::unique_ptr<Stream>& s : streams_) s->BeginBatch();
}

absl::Status MetaStream::EndBatch() {
  if (batch_depth_ == 0 || --batch_depth_ > 0) return absl::OkStatus();
  absl::Status status;
  for (const std::unique_ptr<Stream>& s : streams_) status.Update(s->EndBatch());
  return status;
}

absl::Status MetaStream::SendHeld() {
  if (batch_depth_ == 0) return absl::OkStatus();
  absl::Status status;
  for (const std::unique_ptr<Stream>& s : streams_) {
    status.Update(s->EndBatch());
    s->BeginBatch();
  }
  return status;
}

absl::Status MetaStream::RecordEvent(Event* event) {
  auto* e = dynamic_cast<MetaEvent*>(event);
  if (e == nullptr) return absl::InvalidArgumentError("not an event of a meta device");
  for (size_t d = 0; d < streams_.size(); ++d) {
    TG_RETURN_IF_ERROR(streams_[d]->RecordEvent(e->device_event(static_cast<int>(d))));
  }
  return absl::OkStatus();
}

absl::Status MetaStream::Compute(Graph& graph) {
  TG_ASSIGN_OR_RETURN(std::shared_ptr<PartitionPlan> plan, PlanFor(graph));
  TG_RETURN_IF_ERROR(memory_->Place(*plan));
  TG_RETURN_IF_ERROR(Upload(*plan, graph));
  TG_RETURN_IF_ERROR(Execute(*plan));
  Register(plan, graph);
  last_plan_ = std::move(plan);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<PartitionPlan>> MetaStream::PlanFor(Graph& graph) {
  // A cached plan whose leafs bind the same way is replayed: it re-derives the states for
  // this graph's shapes and refreshes its own tensors, or fails when the structure differs.
  // (Cheaper than hashing the topology, which changes every decode step anyway.) For the
  // graph it was last derived from, every tensor as it was (a decode step's graph reused
  // within a KV block), the plan holds as it is.
  for (auto it = cache_.begin(); it != cache_.end(); ++it) {
    if (!BindingsMatch(*device_, *it->plan, graph)) continue;
    Cached hit = std::move(*it);
    cache_.erase(it);
    if (hit.graph.Matches(graph)) {
      ++reruns_;
    } else {
      if (!ReplayPartition(*device_, graph, hit.plan.get())) break;
      ++replays_;
      hit.graph.Take(graph);
    }
    std::shared_ptr<PartitionPlan> plan = hit.plan;
    cache_.push_front(std::move(hit));
    return plan;
  }
  TG_ASSIGN_OR_RETURN(std::shared_ptr<PartitionPlan> plan, PartitionGraph(*device_, graph));
  ++partitions_;
  cache_.push_front({plan, {}});
  cache_.front().graph.Take(graph);
  if (cache_.size() > kPlanCacheSize) cache_.pop_back();
  return plan;
}

absl::Status MetaStream::Upload(PartitionPlan& plan, Graph& graph) {
  for (const PartitionPlan::Io& in : plan.inputs) {
    Tensor* orig = SlotTensor(graph, in.slot);
    MetaBuffer* mb = device_->AsOwnBuffer(orig->buffer);
    if (mb == nullptr || !mb->holds_graph_tensors()) {
      return absl::FailedPreconditionError(
          absl::StrCat(DescribeTensor(*orig), " is not in a compute buffer of ", device_->name()));
    }
    std::optional<std::vector<uint8_t>> bytes = mb->TakePending(orig);
    if (!bytes.has_value()) continue;
    // A device may write big inputs only after its earlier work (an upload that waits):
    // then no other device's work may still be held here, which that work could need.
    if (bytes->size() > kHeldInputBytes) TG_RETURN_IF_ERROR(SendHeld());
    TG_RETURN_IF_ERROR(ScatterToShadows(*orig, in.set, bytes->data()));
  }
  return absl::OkStatus();
}

absl::Status MetaStream::Execute(PartitionPlan& plan) {
  failed_.store(false);
  for (absl::Status& s : rank_status_) s = absl::OkStatus();
  // Each device's work of the plan goes out in batches (one message to a remote device)
  // when its all-reduces only queue (RPC devices summed by their servers): one batch for
  // the plan, cut before each step whose collectives wait for the devices (an all-gather
  // staged through the host), so that nothing is held back while anyone waits.
  const bool batch = reducer_->QueuesOnly();
  // Then the host's threads only queue, and a step's time is the devices': split into the
  // compute time their streams report (the slowest device's) and the rest (collectives,
  // latency, waiting), which RunRank's host clocks cannot see. Plans queued without
  // waiting are counted when the stream is next synchronized.
  if (batch && AllQueue(plan)) {
    StartTiming();
    QueueAll(plan);
  } else {
    // The devices' threads batch and wait on their own: what the caller holds goes out,
    // and what was queued before is done, first.
    const int held = batch_depth_;
    if (held > 0) {
      batch_depth_ = 1;
      TG_RETURN_IF_ERROR(EndBatch());
    }
    TG_RETURN_IF_ERROR(Synchronize());
    if (batch) StartTiming();
    pool_.Run([&](int rank) { RunRank(rank, plan, batch); });
    if (batch) TG_RETURN_IF_ERROR(Synchronize());
    for (int i = 0; i < held; ++i) BeginBatch();
  }
  for (const PlanStep& step : plan.steps) {
    for (const Graph& g : step.graphs) stats_.splits += g.nodes.empty() ? 0 : 1;
  }
  for (const absl::Status& s : rank_status_) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

void MetaStream::RunRank(int rank, PartitionPlan& plan, bool batch) {
  auto fail = [&](absl::Status s) {
    if (rank_status_[rank].ok()) rank_status_[rank] = std::move(s);
    failed_.store(true);
  };
  if (batch) streams_[rank]->BeginBatch();
  auto t0 = std::chrono::steady_clock::now();
  for (PlanStep& step : plan.steps) {
    Graph& g = step.graphs[rank];
    if (!g.nodes.empty() && !failed_.load(std::memory_order_relaxed)) {
      if (absl::Status s = streams_[rank]->Compute(g); !s.ok()) fail(std::move(s));
    }
    if (step.comms.empty()) continue;
    bool waits = false;
    for (const CommOp& op : step.comms) waits = waits || Waits(op);
    // Every rank sends what it holds before any rank waits (the barrier).
    if (batch && waits) {
      if (absl::Status s = streams_[rank]->EndBatch(); !s.ok()) fail(std::move(s));
    }
    // Collectives run even after a failure (on whatever the memory holds), so that every
    // rank passes the same barriers; the first error is reported.
    barrier_.Wait();
    if (rank == 0 && !batch) {
      stats_.compute_us += MicrosSince(t0);
      t0 = std::chrono::steady_clock::now();
    }
    for (CommOp& op : step.comms) {
      if (absl::Status s = RunComm(rank, op, plan.writes_graph_tensors); !s.ok()) {
        fail(std::move(s));
      }
    }
    if (batch && waits) streams_[rank]->BeginBatch();
    if (rank == 0 && !batch) {
      stats_.transfer_us += MicrosSince(t0);
      t0 = std::chrono::steady_clock::now();
    }
  }
  // Compute returns when every device is done: a device whose Compute only queued the work
  // (a remote one) must not still be writing, or answering, when the next Compute lays its
  // tensors into the same memory.
  if (batch) {
    if (absl::Status s = streams_[rank]->EndBatch(); !s.ok()) fail(std::move(s));
  }
  if (absl::Status s = streams_[rank]->Synchronize(); !s.ok()) fail(std::move(s));
  if (rank == 0 && !batch) stats_.compute_us += MicrosSince(t0);
}

bool MetaStream::AllQueue(const PartitionPlan& plan) const {
  for (const PlanStep& step : plan.steps) {
    for (const CommOp& op : step.comms) {
      if (Waits(op)) return false;
    }
  }
  return true;
}

void MetaStream::QueueAll(PartitionPlan& plan) {
  const int n = static_cast<int>(streams_.size());
  auto fail = [&](int rank, absl::Status s) {
    if (rank_status_[rank].ok()) rank_status_[rank] = std::move(s);
    failed_.store(true);
  };
  BeginBatch();
  for (PlanStep& step : plan.steps) {
    for (int r = 0; r < n; ++r) {
      Graph& g = step.graphs[r];
      if (g.nodes.empty() || failed_.load(std::memory_order_relaxed)) continue;
      if (absl::Status s = streams_[r]->Compute(g); !s.ok()) fail(r, std::move(s));
    }
    // Collectives are queued even after a failure, as RunRank runs them: a server waiting
    // for its peer's piece of an all-reduce gets it.
    for (CommOp& op : step.comms) {
      if (absl::Status s = QueueComm(op); !s.ok()) fail(0, std::move(s));
    }
  }
  if (absl::Status s = EndBatch(); !s.ok()) fail(0, std::move(s));
}

absl::Status MetaStream::QueueComm(CommOp& op) {
  absl::Status status;
  for (int r = 0; r < static_cast<int>(streams_.size()); ++r) {
    if (op.kind == CommOp::Kind::kAllGather) {
      status.Update(PlaceSliceForSum(r, *op.full, op.state, op.src, op.dst, *streams_[r]));
    } else {
      status.Update(ZeroFill(op, r));
    }
  }
  status.Update(reducer_->Queue(op.dst));
  return status;
}

bool MetaStream::Waits(const CommOp& op) const {
  if (!reducer_->QueuesOnly()) return true;
  return op.kind == CommOp::Kind::kAllGather && (device_->options().allreduce.force_staging ||
                                                 !GathersBySum(*op.full, op.state, op.src, op.dst));
}

// Collectives read other ranks' tensors; those stay as they are until the ranks meet at
// the next step's barrier unless the graph writes into graph tensors (wait_for_peers).
absl::Status MetaStream::RunComm(int rank, CommOp& op, bool wait_for_peers) {
  if (op.kind == CommOp::Kind::kAllGather && !Waits(op)) {
    return GatherBySumRank(rank, *op.full, op.state, op.src, op.dst, *streams_[rank], *reducer_,
                           wait_for_peers, barrier_);
  }
  if (op.kind == CommOp::Kind::kAllGather) {
    return AllGatherRank(rank, *op.full, op.state, op.src, op.dst,
                         device_->options().allreduce.force_staging, wait_for_peers, barrier_);
  }
  absl::Status zeroed;
  bool any_zero = false;
  for (bool z : op.zero_fill) any_zero = any_zero || z;
  if (any_zero) {
    zeroed = ZeroFill(op, rank);
    barrier_.Wait();
  }
  absl::Status reduced = reducer_->RunRank(rank, op.dst, barrier_, wait_for_peers);
  return zeroed.ok() ? reduced : zeroed;
}

void MetaStream::Register(const std::shared_ptr<PartitionPlan>& plan, Graph& graph) {
  absl::flat_hash_set<MetaBuffer*> reset;
  for (const PartitionPlan::Io& r : plan->results) {
    Tensor* orig = SlotTensor(graph, r.slot);
    auto* mb = static_cast<MetaBuffer*>(orig->buffer);
    if (reset.insert(mb).second) mb->ResetGraphTensors();
    ShadowSet set = r.set;
    set.owner = plan;
    mb->RegisterGraphTensor(orig, std::move(set), memory_, memory_->epoch());
  }
}

}  // namespace tg::meta
