#include "backends/register_builtin.h"

#include "backends/cpu/cpu_device.h"

namespace tg {

absl::Status RegisterBuiltinBackends() { return cpu::RegisterCpuFamily(); }

}  // namespace tg
