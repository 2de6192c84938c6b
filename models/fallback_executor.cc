#include "models/fallback_executor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/lost_endpoint.h"
#include "core/status_macros.h"
#include "models/scheduled_executor.h"
#include "models/single_device_executor.h"

namespace tg {

absl::StatusOr<std::unique_ptr<FallbackExecutor>> FallbackExecutor::Create(
    Device* device, Device* cpu, const ExecutorOptions& options) {
  if (cpu == nullptr || cpu == device) {
    return absl::InvalidArgumentError(
        absl::StrCat("FallbackExecutor for ", device->name(), " needs a CPU device beside it"));
  }
  TG_ASSIGN_OR_RETURN(std::unique_ptr<SingleDeviceExecutor> single,
                      SingleDeviceExecutor::Create(device, options.greedy_batch));
  return std::unique_ptr<FallbackExecutor>(
      new FallbackExecutor(std::move(single), device, cpu, options.n_copies));
}

FallbackExecutor::FallbackExecutor(std::unique_ptr<Executor> single, Device* device, Device* cpu,
                                   int n_copies)
    : single_(std::move(single)), device_(device), cpu_(cpu), n_copies_(n_copies) {}

absl::Status FallbackExecutor::FallBack(const absl::Status& refusal) {
  Device* devices[] = {device_, cpu_};  // the device first: it has priority for every node.
  absl::StatusOr<std::unique_ptr<ScheduledExecutor>> scheduled =
      ScheduledExecutor::Create(devices, n_copies_);
  if (!scheduled.ok()) {
    return KeepIdentity(
        scheduled.status(),
        absl::Status(scheduled.status().code(),
                     absl::StrCat(refusal.message(), "; and scheduling with ", cpu_->name(),
                                  " failed: ", scheduled.status().message())));
  }
  scheduled_ = *std::move(scheduled);
  fallback_reason_ = std::string(refusal.message());
  return absl::OkStatus();
}

void FallbackExecutor::SumTimings() {
  DecodeTimings sum = single_->timings();
  if (scheduled_ != nullptr) {
    const DecodeTimings& s = scheduled_->timings();
    sum.build_us += s.build_us;
    sum.compute_us += s.compute_us;
    sum.transfer_us += s.transfer_us;
    sum.overhead_us += s.overhead_us;
    sum.graphs += s.graphs;
    sum.splits += s.splits;
    sum.fallback_graphs = s.graphs;
    sum.fallback_reason = fallback_reason_;
  }
  mutable_timings() = sum;
}

absl::Status FallbackExecutor::Run(Batch& batch) {
  absl::Status s;
  if (scheduled_ == nullptr) {
    s = single_->Run(batch);
    if (absl::IsUnimplemented(s)) s = FallBack(s);
    if (s.ok() && scheduled_ != nullptr) s = scheduled_->Run(batch);
  } else {
    s = scheduled_->Run(batch);
  }
  SumTimings();
  return s;
}

absl::Status FallbackExecutor::Generate(PickSteps& steps, int32_t token, int64_t max_tokens,
                                        absl::FunctionRef<bool(int32_t)> on_token) {
  absl::Status s;
  if (scheduled_ == nullptr) {
    bool handed = false;
    s = single_->Generate(steps, token, max_tokens, [&](int32_t pick) {
      handed = true;
      return on_token(pick);
    });
    // A refusal before any pick was handed over: nothing moved on, the scheduler starts over.
    if (absl::IsUnimplemented(s) && !handed) {
      s = FallBack(s);
      if (s.ok()) s = scheduled_->Generate(steps, token, max_tokens, on_token);
    }
  } else {
    s = scheduled_->Generate(steps, token, max_tokens, on_token);
  }
  SumTimings();
  return s;
}

}  // namespace tg
