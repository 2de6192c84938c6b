#include "models/llama_session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "models/llama_graph.h"

namespace tg {
namespace {

double MicrosSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
      .count();
}

absl::Status SetInput(Stream* stream, Tensor* t, const void* data, size_t bytes) {
  if (stream != nullptr) return stream->SetTensorAsync(t, data, 0, bytes);
  return t->buffer->SetTensor(t, data, 0, bytes);
}

// Reads what `logits` and `argmax` ask for (the graph was built for it).
absl::Status ReadResults(const LlamaGraph& g, float* logits, int32_t* argmax) {
  if (logits != nullptr) {
    TG_RETURN_IF_ERROR(g.logits->buffer->GetTensor(g.logits, logits, 0, g.logits->NumBytes()));
  }
  if (argmax != nullptr) {
    // The last output row's pick.
    const size_t offset = g.argmax->NumBytes() - sizeof(int32_t);
    TG_RETURN_IF_ERROR(g.argmax->buffer->GetTensor(g.argmax, argmax, offset, sizeof(int32_t)));
  }
  return absl::OkStatus();
}

}  // namespace

GraphOutput LlamaSession::OutputOf(const Readback& out) {
  return out.argmax != nullptr ? GraphOutput::kArgmax : GraphOutput::kLogits;
}

absl::StatusOr<std::unique_ptr<LlamaSession>> LlamaSession::Create(const LlamaModel& model,
                                                                   const SessionOptions& options) {
  if (options.n_batch <= 0) return absl::InvalidArgumentError("batch size must be positive");
  if (options.n_copies < 0 || options.n_copies > kMaxSchedulerCopies) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline copies ", options.n_copies,
                                                   " outside [0, ", kMaxSchedulerCopies, "]"));
  }
  if (options.kv_pad < 0) return absl::InvalidArgumentError("kv_pad must not be negative");
  if (options.greedy_batch < 0 || options.greedy_batch > kMaxGreedyBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("greedy batch ", options.greedy_batch, " outside [0, ", kMaxGreedyBatch, "]"));
  }
  std::unique_ptr<LlamaSession> s(new LlamaSession(model));
  s->options_ = options;
  if (s->options_.kv_pad == 0) s->options_.kv_pad = kDefaultKvPad;
  if (model.multi_device()) {
    TG_RETURN_IF_ERROR(s->CreateScheduler());
    return s;
  }
  TG_ASSIGN_OR_RETURN(
      s->cache_, KvCache::Create(model.hparams(), options.n_ctx, options.kv_type, model.device()));
  TG_ASSIGN_OR_RETURN(s->stream_, model.device()->CreateStream());
  s->allocator_ = std::make_unique<GraphAllocator>(model.device()->default_buffer_type());
  // Greedy steps are queued ahead where events tell when each pick has arrived.
  std::vector<GreedyStep> ring(
      2 * static_cast<size_t>(options.greedy_batch == 0 ? kMaxGreedyBatch : options.greedy_batch));
  for (GreedyStep& step : ring) {
    absl::StatusOr<std::unique_ptr<Event>> event = model.device()->CreateEvent();
    if (!event.ok()) return s;
    step.event = std::move(*event);
  }
  s->greedy_steps_ = std::move(ring);
  return s;
}

// Each layer's cache beside its weights; one stream per device that holds anything, in layer
// order (the scheduler's priority order).
absl::Status LlamaSession::CreateScheduler() {
  const LayerPlacement& placement = model_.placement();
  std::vector<Device*> layer_devices;
  for (int64_t il = 0; il < model_.hparams().n_layer; ++il) {
    layer_devices.push_back(placement.layer(il));
  }
  TG_ASSIGN_OR_RETURN(
      cache_, KvCache::Create(model_.hparams(), options_.n_ctx, options_.kv_type, layer_devices));
  std::vector<SchedulerBackend> backends;
  for (Device* d : placement.UsedDevices()) {
    TG_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream, d->CreateStream());
    backends.push_back({d, stream.get()});
    streams_.push_back(std::move(stream));
  }
  SchedulerOptions so;
  so.n_copies = options_.n_copies == 0 ? kDefaultPipelineCopies : options_.n_copies;
  TG_ASSIGN_OR_RETURN(scheduler_, Scheduler::Create(std::move(backends), so));
  return absl::OkStatus();
}

absl::Status LlamaSession::CheckBatch(absl::Span<const int32_t> tokens) const {
  const int64_t n_vocab = model_.hparams().n_vocab;
  if (tokens.empty()) return absl::InvalidArgumentError("no tokens to decode");
  for (int32_t id : tokens) {
    if (id < 0 || id >= n_vocab) {
      return absl::InvalidArgumentError(
          absl::StrFormat("token id %d is outside the vocabulary [0, %d)", id, n_vocab));
    }
  }
  if (n_past_ + static_cast<int64_t>(tokens.size()) > cache_->n_ctx()) {
    return absl::OutOfRangeError(
        absl::StrFormat("context full: %d + %d tokens exceed %d (raise -c)", n_past_, tokens.size(),
                        cache_->n_ctx()));
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<const float>> LlamaSession::Decode(absl::Span<const int32_t> tokens,
                                                             bool all_logits) {
  TG_RETURN_IF_ERROR(CheckBatch(tokens));
  logits_.resize((all_logits ? tokens.size() : 1) * model_.hparams().n_vocab);
  TG_RETURN_IF_ERROR(RunBatches(tokens, all_logits, {.logits = logits_.data()}));
  return absl::Span<const float>(logits_);
}

absl::StatusOr<int32_t> LlamaSession::DecodeGreedy(absl::Span<const int32_t> tokens) {
  TG_RETURN_IF_ERROR(CheckBatch(tokens));
  int32_t token = -1;
  TG_RETURN_IF_ERROR(RunBatches(tokens, /*all_logits=*/false, {.argmax = &token}));
  return token;
}

// Cuts tokens into batches of at most n_batch; only the last one's results are read unless
// every row's logits are wanted.
absl::Status LlamaSession::RunBatches(absl::Span<const int32_t> tokens, bool all_logits,
                                      Readback out) {
  const int64_t n_vocab = model_.hparams().n_vocab;
  for (size_t done = 0; done < tokens.size();) {
    const size_t n = std::min<size_t>(options_.n_batch, tokens.size() - done);
    const bool last = done + n == tokens.size();
    Readback batch_out;
    if (all_logits) {
      batch_out.logits = out.logits + done * n_vocab;
    } else if (last) {
      batch_out = out;
    }
    TG_RETURN_IF_ERROR(RunBatch(tokens.subspan(done, n), all_logits, batch_out));
    done += n;
  }
  return absl::OkStatus();
}

absl::Status LlamaSession::RunBatch(absl::Span<const int32_t> tokens, bool all_logits,
                                    Readback out) {
  if (scheduler_ == nullptr) return RunOnOneDevice(tokens, all_logits, out);
  if (scheduler_->n_copies() > 1 && tokens.size() > 1) return RunPipelined(tokens, all_logits, out);
  return RunScheduled(tokens, all_logits, out);
}

absl::StatusOr<std::unique_ptr<LlamaGraph>> LlamaSession::BuildBatchGraph(int64_t n_tokens,
                                                                          int64_t n_past,
                                                                          bool all_logits,
                                                                          GraphOutput output) {
  ++graphs_built_;
  return BuildLlamaGraph(model_, *cache_, n_tokens, n_past, all_logits ? n_tokens : 1,
                         options_.kv_pad, output);
}

absl::Status LlamaSession::FillInputs(const LlamaGraph& g, absl::Span<const int32_t> tokens,
                                      int64_t n, int64_t n_past, Stream* stream) {
  if (!tokens.empty()) {
    TG_RETURN_IF_ERROR(SetInput(stream, g.tokens, tokens.data(), n * sizeof(int32_t)));
  }
  scratch_i32_.resize(n);
  for (int64_t i = 0; i < n; ++i) scratch_i32_[i] = static_cast<int32_t>(n_past + i);
  TG_RETURN_IF_ERROR(SetInput(stream, g.pos, scratch_i32_.data(), n * sizeof(int32_t)));
  // Causal mask: token i (at position n_past + i) sees cells 0..n_past + i.
  const int64_t n_kv = g.n_kv;
  scratch_mask_.assign(n_kv * n, -std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < n; ++i) {
    std::fill_n(scratch_mask_.begin() + i * n_kv, n_past + i + 1, 0.0f);
  }
  TG_RETURN_IF_ERROR(
      SetInput(stream, g.mask, scratch_mask_.data(), scratch_mask_.size() * sizeof(float)));
  if (g.out_ids != nullptr) {
    const int32_t last = static_cast<int32_t>(n - 1);
    TG_RETURN_IF_ERROR(SetInput(stream, g.out_ids, &last, sizeof(last)));
  }
  return absl::OkStatus();
}

bool LlamaSession::LastGraphFits(int64_t n, int64_t n_past, bool all_logits,
                                 GraphOutput output) const {
  const LlamaGraph* g = last_graph_.get();
  return g != nullptr && g->n_tokens == n && last_all_logits_ == all_logits &&
         g->n_kv == AttendedCells(cache_->n_ctx(), n_past, n, options_.kv_pad) &&
         g->output == output;
}

absl::StatusOr<LlamaGraph*> LlamaSession::OneDeviceGraph(int64_t n, int64_t n_past, bool all_logits,
                                                         GraphOutput output) {
  if (LastGraphFits(n, n_past, all_logits, output)) return last_graph_.get();
  last_graph_.reset();
  TG_ASSIGN_OR_RETURN(last_graph_, BuildBatchGraph(n, n_past, all_logits, output));
  last_all_logits_ = all_logits;
  if (absl::Status s = allocator_->Allocate(last_graph_->graph); !s.ok()) {
    last_graph_.reset();
    return s;
  }
  return last_graph_.get();
}

absl::Status LlamaSession::RunOnOneDevice(absl::Span<const int32_t> tokens, bool all_logits,
                                          Readback out) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t n = static_cast<int64_t>(tokens.size());
  TG_ASSIGN_OR_RETURN(LlamaGraph * g, OneDeviceGraph(n, n_past_, all_logits, OutputOf(out)));
  TG_RETURN_IF_ERROR(FillInputs(*g, tokens, n, n_past_, stream_.get()));
  timings_.build_us += MicrosSince(t0);
  const StreamStats before = stream_->stats();
  const auto t1 = std::chrono::steady_clock::now();
  TG_RETURN_IF_ERROR(stream_->Compute(g->graph));
  TG_RETURN_IF_ERROR(stream_->Synchronize());
  timings_.compute_us += MicrosSince(t1);
  // A meta device (--split-mode tensor) reports its all-reduce time and per-device pieces.
  const StreamStats after = stream_->stats();
  timings_.transfer_us += after.transfer_us - before.transfer_us;
  timings_.splits += std::max<int64_t>(1, after.splits - before.splits);
  ++timings_.graphs;
  n_past_ += n;
  return ReadResults(*g, out.logits, out.argmax);
}

absl::Status LlamaSession::GenerateGreedy(int32_t token, int64_t max_tokens,
                                          absl::FunctionRef<bool(int32_t)> on_token) {
  if (!QueuesGreedyAhead()) {
    for (int64_t i = 0; i < max_tokens; ++i) {
      TG_ASSIGN_OR_RETURN(token, DecodeGreedy({&token, 1}));
      if (!on_token(token)) break;
    }
    return absl::OkStatus();
  }
  if (max_tokens <= 0) return absl::OkStatus();
  TG_RETURN_IF_ERROR(CheckBatch({&token, 1}));
  const int64_t ring = static_cast<int64_t>(greedy_steps_.size());  // 2 * the largest batch.
  const auto start = std::chrono::steady_clock::now();
  int64_t batch = options_.greedy_batch == 0 ? 1 : options_.greedy_batch;
  // Steps queued and picks handed over; step i runs at position n_past_ + (i - done).
  int64_t queued = 0;
  int64_t done = 0;
  const int32_t* host_token = &token;  // the next step's token, when it comes from the host.
  absl::Status status;
  while (status.ok()) {
    // Queue the next batch once at most one is in flight. A step takes its token from the
    // step before it (the ARGMAX its graph copied into its token input) while it runs in the
    // same graph and the context has room.
    if (queued < max_tokens && queued - done <= batch) {
      stream_->BeginBatch();
      for (int64_t k = 0; k < batch && queued < max_tokens && status.ok(); ++k) {
        const int64_t n_past = n_past_ + (queued - done);
        if (host_token == nullptr &&
            (n_past + 1 > cache_->n_ctx() ||
             !LastGraphFits(1, n_past, false, GraphOutput::kArgmaxFedBack))) {
          break;
        }
        status = QueueGreedyStep(host_token, n_past, greedy_steps_[queued % ring]);
        host_token = nullptr;
        ++queued;
      }
      const absl::Status sent = stream_->EndBatch();
      if (status.ok()) status = sent;
      if (!status.ok()) break;
    }
    if (queued == done) {
      // Nothing in flight and nothing queued: the next step starts a new graph (a new KV
      // block) or the context is full. Its token comes from the host.
      host_token = &greedy_steps_[(done - 1) % ring].pick;
      status = CheckBatch({host_token, 1});
      continue;
    }
    GreedyStep& step = greedy_steps_[done % ring];
    status = WaitGreedyStep(step);
    if (!status.ok()) break;
    ++n_past_;
    ++done;
    if (options_.greedy_batch == 0) {
      const double step_us = MicrosSince(start) / static_cast<double>(done);
      batch = std::clamp<int64_t>(std::llround(kGreedyBatchUs / step_us), 1, kMaxGreedyBatch);
    }
    if (!on_token(step.pick) || done == max_tokens) break;  // steps ahead are discarded.
  }
  // Whatever happened, nothing stays in flight (discarded steps, or the work before an
  // error) once this returns.
  absl::Status drained = stream_->Synchronize();
  return status.ok() ? drained : status;
}

absl::Status LlamaSession::QueueGreedyStep(const int32_t* token, int64_t n_past, GreedyStep& step) {
  const auto t0 = std::chrono::steady_clock::now();
  TG_ASSIGN_OR_RETURN(LlamaGraph * g,
                      OneDeviceGraph(1, n_past, false, GraphOutput::kArgmaxFedBack));
  const absl::Span<const int32_t> tokens =
      token == nullptr ? absl::Span<const int32_t>() : absl::Span<const int32_t>(token, 1);
  TG_RETURN_IF_ERROR(FillInputs(*g, tokens, 1, n_past, stream_.get()));
  timings_.build_us += MicrosSince(t0);
  const auto t1 = std::chrono::steady_clock::now();
  TG_RETURN_IF_ERROR(stream_->Compute(g->graph));
  TG_RETURN_IF_ERROR(stream_->GetTensorAsync(g->argmax, &step.pick, 0, sizeof(int32_t)));
  TG_RETURN_IF_ERROR(stream_->RecordEvent(step.event.get()));
  timings_.compute_us += MicrosSince(t1);
  ++timings_.graphs;
  ++timings_.splits;
  return absl::OkStatus();
}

absl::Status LlamaSession::WaitGreedyStep(GreedyStep& step) {
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s = step.event->Synchronize();
  timings_.compute_us += MicrosSince(t0);
  return s;
}

void LlamaSession::AddSchedulerTimes(const SchedulerStats& before) {
  const SchedulerStats after = scheduler_->stats();
  timings_.compute_us += after.compute_us - before.compute_us;
  timings_.transfer_us += after.copy_us - before.copy_us;
  timings_.overhead_us += after.overhead_us - before.overhead_us;
  timings_.splits += after.splits - before.splits;
  timings_.graphs += after.graphs - before.graphs;
}

absl::Status LlamaSession::RunScheduled(absl::Span<const int32_t> tokens, bool all_logits,
                                        Readback out) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t n = static_cast<int64_t>(tokens.size());
  TG_ASSIGN_OR_RETURN(std::unique_ptr<LlamaGraph> g,
                      BuildBatchGraph(n, n_past_, all_logits, OutputOf(out)));
  TG_ASSIGN_OR_RETURN(std::unique_ptr<ScheduledGraph> scheduled, scheduler_->Schedule(g->graph));
  TG_RETURN_IF_ERROR(FillInputs(*g, tokens, n, n_past_));
  timings_.build_us += MicrosSince(t0);
  const SchedulerStats before = scheduler_->stats();
  absl::Status status = scheduler_->Compute(*scheduled);
  AddSchedulerTimes(before);
  TG_RETURN_IF_ERROR(status);
  n_past_ += n;
  return ReadResults(*g, out.logits, out.argmax);
}

// The batch is cut into up to n_copies micro-batches of nearly equal size, each in its own
// memory slot, all in flight together. The devices run each micro-batch's splits in order,
// and a layer's micro-batches in order (one thread per device), so each micro-batch sees the
// KV cells of the ones before it. The pipeline drains at the end of the batch.
absl::Status LlamaSession::RunPipelined(absl::Span<const int32_t> tokens, bool all_logits,
                                        Readback out) {
  struct InFlight {
    std::unique_ptr<LlamaGraph> graph;
    std::unique_ptr<ScheduledGraph> scheduled;  // declared after graph: destroyed first.
    Readback out;
  };
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t n_micro = std::min<int64_t>(scheduler_->n_copies(), n);
  const int64_t n_vocab = model_.hparams().n_vocab;
  std::vector<InFlight> slots(n_micro);
  auto finish = [&](InFlight& f) {
    absl::Status s = f.scheduled == nullptr ? absl::OkStatus() : scheduler_->Wait(*f.scheduled);
    if (s.ok() && f.scheduled != nullptr) s = ReadResults(*f.graph, f.out.logits, f.out.argmax);
    f.scheduled.reset();
    f.graph.reset();
    return s;
  };
  auto submit = [&](InFlight& f, int slot, int64_t offset, int64_t size, bool last) {
    const auto t0 = std::chrono::steady_clock::now();
    f.out = {};
    if (all_logits) {
      f.out.logits = out.logits == nullptr ? nullptr : out.logits + offset * n_vocab;
    } else if (last) {
      f.out = out;
    }
    TG_ASSIGN_OR_RETURN(f.graph,
                        BuildBatchGraph(size, n_past_ + offset, all_logits, OutputOf(f.out)));
    TG_ASSIGN_OR_RETURN(f.scheduled, scheduler_->Schedule(f.graph->graph, slot));
    TG_RETURN_IF_ERROR(FillInputs(*f.graph, tokens.subspan(offset, size), size, n_past_ + offset));
    timings_.build_us += MicrosSince(t0);
    return scheduler_->Submit(*f.scheduled);
  };
  const SchedulerStats before = scheduler_->stats();
  absl::Status status;
  int64_t offset = 0;
  for (int64_t m = 0; m < n_micro && status.ok(); ++m) {
    const int64_t size = n / n_micro + (m < n % n_micro ? 1 : 0);
    status = submit(slots[m], static_cast<int>(m), offset, size, m + 1 == n_micro);
    offset += size;
  }
  // Every micro-batch in flight is waited for, even after an error: the device threads still
  // read their graphs.
  for (InFlight& f : slots) {
    absl::Status s = finish(f);
    if (status.ok()) status = s;
  }
  AddSchedulerTimes(before);
  TG_RETURN_IF_ERROR(status);
  n_past_ += n;
  return absl::OkStatus();
}

}  // namespace tg
