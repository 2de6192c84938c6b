// --split-mode tensor for llama-family models: the meta device over the plan's devices, with
// the split state of every weight and KV-cache tensor (attention q/k/v and ffn gate/up split
// by output rows in whole heads, attention output and ffn down by input columns, output head
// by vocabulary rows, KV cache by KV head, everything else mirrored).
#ifndef TENSORGRID_MODELS_LLAMA_TENSOR_SPLIT_H_
#define TENSORGRID_MODELS_LLAMA_TENSOR_SPLIT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "models/llama_hparams.h"
#include "models/split_mode.h"

namespace tg {

absl::StatusOr<std::unique_ptr<Device>> CreateTensorSplitDevice(const LlamaHParams& hp,
                                                                const DevicePlan& plan);

}  // namespace tg

#endif  // TENSORGRID_MODELS_LLAMA_TENSOR_SPLIT_H_
