// Device selection for tg-ops (see devices.h).
#include "tools/tg-ops/devices.h"

#include "backends/cpu/cpu_device.h"
#include "core/registry.h"

namespace tg::ops_tool {

bool IsCpuFamily(const Device& device) { return device.type() == DeviceType::kCpu; }

absl::StatusOr<std::vector<Device*>> SelectDevices(const Options& opts) {
  std::vector<Device*> all = Registry::Get().devices();
  if (opts.threads.has_value()) {
    // Every CPU device, not only the selected ones: the CPU device is also the yardstick
    // for other devices.
    for (Device* d : all) {
      if (auto* cpu = dynamic_cast<cpu::CpuDevice*>(d); cpu != nullptr) {
        cpu->set_n_threads(*opts.threads);
      }
    }
  }
  if (opts.device.empty()) {
    if (all.empty()) return absl::NotFoundError("no devices are registered");
    return all;
  }
  absl::StatusOr<Device*> device = Registry::Get().FindDevice(opts.device);
  if (!device.ok()) return device.status();
  return std::vector<Device*>{*device};
}

}  // namespace tg::ops_tool
