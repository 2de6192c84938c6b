// Device selection for tg-ops (see devices.h).
#include "tools/tg-ops/devices.h"

#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/rpc/device_flags.h"
#include "core/registry.h"
#include "core/status_macros.h"
#include "tools/tg-ops/meta_devices.h"

namespace tg::ops_tool {
namespace {

// The meta devices live as long as the process (a tool runs one command).
std::vector<std::unique_ptr<Device>>& MetaDevices() {
  static auto* devices = new std::vector<std::unique_ptr<Device>>();
  return *devices;
}

absl::StatusOr<std::vector<Device*>> MetaSpan(const Options& opts,
                                              const std::vector<Device*>& all) {
  std::vector<Device*> over;
  if (!opts.meta_devices.empty()) {
    for (absl::string_view name : absl::StrSplit(opts.meta_devices, ',', absl::SkipEmpty())) {
      TG_ASSIGN_OR_RETURN(Device * d, Registry::Get().FindDevice(name));
      over.push_back(d);
    }
    return over;
  }
  for (Device* d : all) {
    if (opts.split_mode == "tensor" || IsCpuFamily(*d)) over.push_back(d);
  }
  return over;
}

}  // namespace

bool IsCpuFamily(const Device& device) { return device.type() == DeviceType::kCpu; }

absl::StatusOr<std::vector<Device*>> SelectDevices(const Options& opts) {
  std::vector<Device*> all = Registry::Get().devices();
  if (opts.threads.has_value()) {
    // Every CPU device, not only the selected ones: the CPU device is also the yardstick
    // for other devices.
    SetThreads(all, *opts.threads);
  }
  if (all.empty()) return absl::NotFoundError("no devices are registered");
  std::vector<Device*> selected;
  if (opts.split_mode != "tensor") selected = all;
  if (opts.split_mode != "none") {
    TG_ASSIGN_OR_RETURN(std::vector<Device*> over, MetaSpan(opts, all));
    if (over.size() >= 2) {
      TG_ASSIGN_OR_RETURN(MetaDevices(), MakeMetaDevices(over));
      for (const auto& m : MetaDevices()) selected.push_back(m.get());
    } else if (opts.split_mode == "tensor") {
      return absl::InvalidArgumentError(absl::StrCat("-sm tensor needs at least two devices, have ",
                                                     over.size(),
                                                     " (set TG_CPU_DEVICES=2 or more)"));
    }
  }
  if (opts.device.empty()) return selected;
  for (const auto& m : MetaDevices()) {
    if (absl::EqualsIgnoreCase(m->name(), opts.device)) return std::vector<Device*>{m.get()};
  }
  absl::StatusOr<Device*> device = Registry::Get().FindDevice(opts.device);
  if (!device.ok()) return device.status();
  return std::vector<Device*>{*device};
}

}  // namespace tg::ops_tool
