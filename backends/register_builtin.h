// Registers every backend family compiled into this build with the process registry.
#ifndef TENSORGRID_BACKENDS_REGISTER_BUILTIN_H_
#define TENSORGRID_BACKENDS_REGISTER_BUILTIN_H_

#include "absl/status/status.h"

namespace tg {

// Idempotent and thread-safe; CPU always, CUDA/Vulkan when built and a device is present.
// `verbose` (a tool's -v): also say why a GPU family is absent where that is the normal case
// of the host (no NVIDIA driver installed); the first call's value counts.
absl::Status RegisterBuiltinBackends(bool verbose = false);

}  // namespace tg

#endif  // TENSORGRID_BACKENDS_REGISTER_BUILTIN_H_
