// FallbackExecutor: runs a session's graphs on one device that may lack kernels for some of
// their nodes (a GPU without SAMPLE, or without a weight type's MUL_MAT). Graphs go to the
// device alone (SingleDeviceExecutor, with its steps queued ahead) until one is refused as
// UNIMPLEMENTED; from then on every graph runs through the scheduler over the device and the
// host CPU, which takes the nodes the device cannot compute, while weights and KV cache stay
// where they are. A refusal after generation has handed over a token is returned as is
// (generation cannot be replayed). Not thread-safe: used by one session's thread.
#ifndef TENSORGRID_MODELS_FALLBACK_EXECUTOR_H_
#define TENSORGRID_MODELS_FALLBACK_EXECUTOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "models/executor.h"

namespace tg {

class FallbackExecutor : public Executor {
 public:
  // `device` runs everything it can; `cpu` (not `device`) takes the rest after a refusal.
  static absl::StatusOr<std::unique_ptr<FallbackExecutor>> Create(Device* device, Device* cpu,
                                                                  const ExecutorOptions& options);

  absl::Status Run(Batch& batch) override;
  absl::Status Generate(PickSteps& steps, int32_t token, int64_t max_tokens,
                        absl::FunctionRef<bool(int32_t)> on_token) override;
  // True once graphs run through the scheduler with the CPU.
  bool fell_back() const { return scheduled_ != nullptr; }

 private:
  FallbackExecutor(std::unique_ptr<Executor> single, Device* device, Device* cpu, int n_copies);
  // Creates the scheduled executor after `refusal` (the single device's UNIMPLEMENTED).
  absl::Status FallBack(const absl::Status& refusal);
  // This executor's timings: the sum of both executors'.
  void SumTimings();

  std::unique_ptr<Executor> single_;
  std::unique_ptr<Executor> scheduled_;  // nullptr until the first refusal.
  Device* device_;
  Device* cpu_;
  int n_copies_;
  std::string fallback_reason_;  // the refusal that made scheduled_.
};

}  // namespace tg

#endif  // TENSORGRID_MODELS_FALLBACK_EXECUTOR_H_
