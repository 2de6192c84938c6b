#include "models/executor.h"

#include "absl/strings/str_cat.h"
#include "core/registry.h"
#include "core/status_macros.h"
#include "models/fallback_executor.h"
#include "models/scheduled_executor.h"
#include "models/single_device_executor.h"

namespace tg {

absl::Status Executor::Generate(PickSteps& steps, int32_t token, int64_t max_tokens,
                                absl::FunctionRef<bool(int32_t)> on_token) {
  for (int64_t i = 0; i < max_tokens; ++i) {
    TG_ASSIGN_OR_RETURN(token, steps.DecodeOne(token));
    if (!on_token(token)) break;
  }
  return absl::OkStatus();
}

absl::StatusOr<ExecutorOptions> PipelineOptions(int n_copies, int64_t min_micro_batch) {
  if (n_copies < 0 || n_copies > kMaxSchedulerCopies) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline copies ", n_copies, " outside [0, ", kMaxSchedulerCopies, "]"));
  }
  ExecutorOptions eo;
  if (n_copies > 0) eo.n_copies = n_copies;
  if (min_micro_batch > 0) eo.min_micro_batch = min_micro_batch;
  return eo;
}

absl::StatusOr<std::unique_ptr<Executor>> CreateExecutor(const LlamaModel& model,
                                                         const ExecutorOptions& options) {
  if (model.multi_device()) {
    return ScheduledExecutor::Create(model.placement().UsedDevices(), options.n_copies,
                                     options.min_micro_batch);
  }
  // A device without a kernel for some node (a GPU without SAMPLE) hands it to the host CPU.
  Device* device = model.device();
  Device* cpu = Registry::Get().CpuDevice();
  if (device->type() != DeviceType::kCpu && cpu != nullptr && cpu != device) {
    return FallbackExecutor::Create(device, cpu, options);
  }
  return SingleDeviceExecutor::Create(device, options.greedy_batch);
}

}  // namespace tg
