#include "models/llama_tensor_split.h"

namespace tg {

absl::StatusOr<std::unique_ptr<Device>> CreateTensorSplitDevice(const LlamaHParams& hp,
                                                                const DevicePlan& plan) {
  return absl::UnimplementedError("--split-mode tensor is not implemented yet");
}

}  // namespace tg
