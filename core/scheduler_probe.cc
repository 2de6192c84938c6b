#include "core/scheduler_probe.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops.h"
#include "core/status_macros.h"

namespace tg {
namespace {

// Nodes of the probe chain: enough splits that the per-split cost dominates the noise.
constexpr int kChainNodes = 64;
constexpr int64_t kChainWidth = 16;  // floats per tensor: one cache line of work.

// A ones vector in `device`'s memory, flagged as a weight so that it pins its reader.
absl::StatusOr<Tensor*> OnesOn(Device* device, Context& ctx,
                               std::vector<std::unique_ptr<Buffer>>& buffers) {
  TG_ASSIGN_OR_RETURN(Tensor * w, ctx.NewTensor(DType::kF32, {kChainWidth}));
  w->SetName(absl::StrCat("probe_ones_", device->name()));
  w->flags |= kFlagWeight;
  TG_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> buffer,
                      device->default_buffer_type()->Allocate(w->NumBytes()));
  buffer->set_usage(BufferUsage::kWeights);
  TG_RETURN_IF_ERROR(PlaceTensor(buffer.get(), w, 0));
  const std::vector<float> ones(kChainWidth, 1.0f);
  TG_RETURN_IF_ERROR(buffer->SetTensor(w, ones.data(), 0, w->NumBytes()));
  buffers.push_back(std::move(buffer));
  return w;
}

// Median time of computing the chain x * w[0] * w[1] * ... (weights used round-robin).
absl::StatusOr<double> TimeChain(absl::Span<const SchedulerBackend> backends,
                                 const std::vector<Tensor*>& weights, int repetitions,
                                 int* splits) {
  Context ctx;
  TG_ASSIGN_OR_RETURN(Tensor * x, ctx.NewTensor(DType::kF32, {kChainWidth}));
  x->flags |= kFlagInput;
  Tensor* y = x;
  for (int i = 0; i < kChainNodes; ++i) {
    TG_ASSIGN_OR_RETURN(y, Mul(ctx, y, weights[i % weights.size()]));
  }
  TG_ASSIGN_OR_RETURN(Graph graph, BuildGraph({y}));
  TG_ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> scheduler,
                      Scheduler::Create({backends.begin(), backends.end()}));
  TG_ASSIGN_OR_RETURN(std::unique_ptr<ScheduledGraph> g, scheduler->Schedule(graph));
  const std::vector<float> zeros(kChainWidth, 0.0f);
  TG_RETURN_IF_ERROR(g->SetInput(x, zeros.data(), x->NumBytes()));
  *splits = static_cast<int>(g->splits().size());
  std::vector<double> us;
  for (int r = 0; r < repetitions + 1; ++r) {  // the first run warms up.
    const auto start = std::chrono::steady_clock::now();
    TG_RETURN_IF_ERROR(scheduler->Compute(*g));
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  us.erase(us.begin());
  std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
  return us[us.size() / 2];
}

}  // namespace

absl::StatusOr<SplitOverhead> MeasureSplitOverhead(absl::Span<const SchedulerBackend> backends,
                                                   int repetitions) {
  if (backends.size() < 2) {
    return absl::FailedPreconditionError("split overhead: needs two devices or more");
  }
  if (repetitions < 1) return absl::InvalidArgumentError("split overhead: repetitions < 1");
  Context ctx;
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::vector<Tensor*> spread;
  for (const SchedulerBackend& b : backends) {
    TG_ASSIGN_OR_RETURN(Tensor * w, OnesOn(b.device, ctx, buffers));
    spread.push_back(w);
  }
  SplitOverhead r;
  int one_split = 0;
  TG_ASSIGN_OR_RETURN(r.one_split_us, TimeChain(backends, {spread[0]}, repetitions, &one_split));
  TG_ASSIGN_OR_RETURN(r.many_splits_us, TimeChain(backends, spread, repetitions, &r.splits));
  r.per_split_us = (r.many_splits_us - r.one_split_us) / std::max(1, r.splits - one_split);
  return r;
}

}  // namespace tg
