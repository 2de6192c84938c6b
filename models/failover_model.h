// FailoverModel: a LlamaModel that can be loaded again without a lost server's devices
// (--rpc-failover). When an error names a remote device's server of the current plan,
// Recover() drops that server's devices (the same split mode, -ts renormalised; one device
// left runs -sm none) and loads the model from its file again on the rest; servers that hold
// the weights in their --cache or model dir take them from there. Sessions on the old model
// must be gone before Recover() (FailoverSession sees to its own); replies the servers left
// still owe the old model are read and dropped first. Not thread-safe.
#ifndef TENSORGRID_MODELS_FAILOVER_MODEL_H_
#define TENSORGRID_MODELS_FAILOVER_MODEL_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/split_mode.h"
#include "models/llama_model.h"

namespace tg {

// One recovery: what was lost, why, where the work runs now and how long it took.
struct FailoverEvent {
  std::string server;  // host:port of the lost server.
  absl::Status error;  // the error that reported it.
  DevicePlan plan;     // the plan the model now runs on.
  // From the error to the model loaded again (for a FailoverSession: and its KV cache
  // rebuilt, so that the next token can be decoded).
  double seconds = 0;
};

class FailoverModel {
 public:
  // Loads `path` on options.plan. With `failover` off, Recover() gives every error back.
  static absl::StatusOr<std::unique_ptr<FailoverModel>> Load(const std::string& path,
                                                             const LoadOptions& options,
                                                             bool failover);

  const LlamaModel& model() const { return *model_; }
  const DevicePlan& plan() const { return options_.plan; }
  bool failover() const { return failover_; }

  // True when failover is on and `error` names a server of plan(): Recover() would act.
  bool Recoverable(const absl::Status& error) const;

  // When failover is on and `error` names a server of plan(): the model loaded again without
  // that server's devices (repeated while the reload itself loses another server). Returns
  // `error` itself when it names no server of the plan or failover is off, and
  // FAILED_PRECONDITION naming the server when no device is left. Invalidates model().
  absl::StatusOr<FailoverEvent> Recover(const absl::Status& error);

 private:
  FailoverModel(std::string path, LoadOptions options, bool failover)
      : path_(std::move(path)), options_(std::move(options)), failover_(failover) {}

  std::string path_;
  LoadOptions options_;  // options_.plan: the plan model_ is loaded on.
  bool failover_;
  std::unique_ptr<LlamaModel> model_;
};

}  // namespace tg

#endif  // TENSORGRID_MODELS_FAILOVER_MODEL_H_
