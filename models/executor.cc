#include "models/executor.h"

#include "core/status_macros.h"
#include "models/scheduled_executor.h"
#include "models/single_device_executor.h"

namespace tg {

absl::Status Executor::GenerateGreedy(GreedySteps& steps, int32_t token, int64_t max_tokens,
                                      absl::FunctionRef<bool(int32_t)> on_token) {
  for (int64_t i = 0; i < max_tokens; ++i) {
    TG_ASSIGN_OR_RETURN(token, steps.DecodeOne(token));
    if (!on_token(token)) break;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Executor>> CreateExecutor(const LlamaModel& model,
                                                         const ExecutorOptions& options) {
  if (model.multi_device()) {
    return ScheduledExecutor::Create(model.placement().UsedDevices(), options.n_copies);
  }
  return SingleDeviceExecutor::Create(model.device(), options.greedy_batch);
}

}  // namespace tg
